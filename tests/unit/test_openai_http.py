"""OpenAIHTTPClient over real HTTP: the fake judge on 127.0.0.1, plus a tiny in-test aiohttp
server for answers the fake judge never gives (403, redirects, HTTP-date Retry-After, a 200
that is not a chat completion, a dropped connection)."""

from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
import gc
import json
import os
import socket
import traceback
import warnings
from typing import Any

import pytest
from aiohttp import web

from scorer_core.errors import (
    ConfigError,
    ConnectionFailed,
    FatalJudgeError,
    JudgeError,
    JudgeTimeout,
    MalformedReply,
    RateLimited,
    RequestRejected,
    ServerError,
)
from scorer_core.openai_http import OPENAI_API_BASE, OpenAIHTTPClient, env_proxy_for
from scorer_core.prompt import (
    REASON_SCHEMA_NAME,
    VERDICTS_SCHEMA,
    VERDICTS_SCHEMA_NAME,
    verdict_messages,
)
from scorer_core.protocols import ChatClient, RequestSettings
from scorer_core.retry import parse_retry_after
from scorer_core.scorer import make_judge
from scorer_core.types import ScoringItem, Usage
from tests.fake_judge import FakeJudgeServer, FaultPlan
from tests.support.fakes import JudgeFactory
from tests.support.hooks import MeetAt
from tests.support.http import Handler, serving

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

MODEL = "openai/fake-judge"
SENTINEL = "sk-SENTINEL-do-not-leak-7f3a9c"
CONTEXTS = ["alpha RELEVANT", "beta", "gamma RELEVANT", "delta"]  # [yes, no, yes, no]
ITEM = ScoringItem(input="which letters?", output="alpha and gamma", contexts=tuple(CONTEXTS))
MESSAGES = verdict_messages(ITEM, [0, 1, 2, 3])

# strict json_schema endpoints refuse maxLength: the reason's cap is left to the instructions
STRICT_SCHEMA = json.loads(json.dumps(VERDICTS_SCHEMA).replace(', "maxLength": 60', ""))


def client(api_base: str, **options: Any) -> OpenAIHTTPClient:
    options.setdefault("api_key", SENTINEL)
    options.setdefault("timeout", 10.0)
    return OpenAIHTTPClient(MODEL, RequestSettings(api_base=api_base, **options))


def complete(c: OpenAIHTTPClient, schema_name: str = VERDICTS_SCHEMA_NAME) -> Any:
    async def go() -> Any:
        return await c.complete(MESSAGES, schema_name=schema_name, schema=VERDICTS_SCHEMA)

    return asyncio.run(go())


def raised(c: OpenAIHTTPClient, schema_name: str = VERDICTS_SCHEMA_NAME) -> JudgeError:
    with pytest.raises(JudgeError) as caught:
        complete(c, schema_name)
    assert_no_secret(caught.value)
    return caught.value


def assert_no_secret(exc: BaseException) -> None:
    """The sentinel key appears nowhere in the error, its chain, or its rendered traceback."""
    rendered = "".join(traceback.format_exception(exc))
    seen: BaseException | None = exc
    while seen is not None:
        rendered += repr(seen) + str(seen) + repr(seen.args) + repr(vars(seen))
        seen = seen.__cause__ or seen.__context__
    assert SENTINEL not in rendered
    assert "SENTINEL" not in rendered


# ----------------------------------------------------------------------------------------------
# the request (the scorer through this client, end to end, is tests/unit/test_scorer_e2e.py's)


def test_request_body_has_the_wire_shape(server: FakeJudgeServer) -> None:
    reply = complete(client(server.url + "/", max_tokens=321))  # trailing slash tolerated
    assert json.loads(reply.text)["verdicts"][0]["v"] == "yes"
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
    (body,) = server.requests()
    assert body["model"] == "fake-judge"  # litellm's provider prefix is not sent
    assert body["messages"] == MESSAGES
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["temperature"] == 0.0
    assert body["max_tokens"] == 321
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": VERDICTS_SCHEMA_NAME, "schema": STRICT_SCHEMA, "strict": True},
    }
    assert set(body) == {"model", "messages", "temperature", "max_tokens", "response_format"}
    assert server.authorization_headers() == {f"Bearer {SENTINEL}"}


def test_body_matches_what_litellm_sends(server: FakeJudgeServer) -> None:
    from scorer_core.litellm_client import LiteLLMClient

    settings = RequestSettings(api_base=server.url, api_key="k", temperature=0.0, max_tokens=50)
    for chat_client in (LiteLLMClient(MODEL, settings), OpenAIHTTPClient(MODEL, settings)):
        complete(chat_client)  # type: ignore[arg-type]
    via_litellm, via_http = server.requests()
    assert via_http == via_litellm


def test_other_model_names_and_no_temperature(server: FakeJudgeServer) -> None:
    complete(client(server.url, temperature=None))
    complete(OpenAIHTTPClient("meta-llama/Llama-3.1-8B", RequestSettings(api_base=server.url)))
    first, second = server.requests()
    assert "temperature" not in first and "max_tokens" not in first
    assert second["model"] == "meta-llama/Llama-3.1-8B"
    assert server.stats()["requests_without_authorization"] == 1  # no key: no header


def test_key_is_stripped_and_checked(server: FakeJudgeServer) -> None:
    typed: ChatClient = client(server.url, api_key=f"  {SENTINEL}\n")  # read from a key file
    complete(typed)  # type: ignore[arg-type]
    assert server.authorization_headers() == {f"Bearer {SENTINEL}"}
    for bad in (f"{SENTINEL} x", f"{SENTINEL}\nX-Evil: 1", f"{SENTINEL}é"):
        with pytest.raises(ConfigError) as caught:
            client(server.url, api_key=bad)
        assert_no_secret(caught.value)
    with pytest.raises(ConfigError, match="timeout"):
        client(server.url, timeout=0)


def test_make_judge_transport_option() -> None:
    judge = make_judge(MODEL, transport="http")
    http = judge._client  # type: ignore[attr-defined]
    assert isinstance(http, OpenAIHTTPClient)
    assert http.url == OPENAI_API_BASE + "/chat/completions"
    # auto (the default): the lean client for OpenAI-style models, litellm for other providers
    assert isinstance(make_judge(MODEL)._client, OpenAIHTTPClient)  # type: ignore[attr-defined]
    other = make_judge("anthropic/claude-3-5-haiku", api_key="k")._client  # type: ignore[attr-defined]
    assert type(other).__name__ == "LiteLLMClient"
    forced = make_judge(MODEL, transport="litellm")._client  # type: ignore[attr-defined]
    assert type(forced).__name__ == "LiteLLMClient"
    # an option only one client takes picks that client
    picked = make_judge(MODEL, request_options={"top_p": 1})._client  # type: ignore[attr-defined]
    assert type(picked).__name__ == "LiteLLMClient"
    with pytest.raises(ConfigError, match="transport"):
        make_judge(MODEL, transport="grpc")
    from jobs.core.config import JudgeConfig

    assert JudgeConfig().transport == "auto"
    assert JudgeConfig(model=MODEL, transport="http").transport == "http"
    with pytest.raises(ValueError, match="transport"):
        JudgeConfig(model=MODEL, transport="grpc")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------
# error translation against the fake judge


def test_429_with_retry_after(server: FakeJudgeServer) -> None:
    server.set_fault_plan(FaultPlan(rate_limit_429=1.0, retry_after_s=7))
    exc = raised(client(server.url))
    assert isinstance(exc, RateLimited)
    assert exc.retry_after == 7.0
    assert str(exc).startswith(f"judge {MODEL}: HTTP 429: Rate limit reached")


def test_429_without_retry_after(server: FakeJudgeServer) -> None:
    server.set_fault_plan(FaultPlan(rate_limit_429_no_header=1.0))
    exc = raised(client(server.url))
    assert isinstance(exc, RateLimited)
    assert exc.retry_after is None


def test_5xx_is_a_server_error(server: FakeJudgeServer) -> None:
    server.set_fault_plan(FaultPlan(server_error=1.0))
    exc = raised(client(server.url))
    assert isinstance(exc, ServerError)
    assert "HTTP 50" in str(exc) and "fake judge injected HTTP 50" in str(exc)
    assert MODEL in str(exc)


def test_slow_reply_is_a_timeout(server: FakeJudgeServer) -> None:
    server.set_fault_plan(FaultPlan(slow=1.0, slow_s=5))
    exc = raised(client(server.url, timeout=0.3))
    assert isinstance(exc, JudgeTimeout)
    assert "timed out after 0.3 s" in str(exc)


def test_bad_request_is_rejected(server: FakeJudgeServer) -> None:
    exc = raised(client(server.url), schema_name="not_a_known_schema")
    assert isinstance(exc, RequestRejected)
    assert "HTTP 400: response_format must be a json_schema named" in str(exc)


def test_unknown_path_is_fatal(server: FakeJudgeServer) -> None:
    exc = raised(client(server.base_url + "/no/such/api"))
    assert isinstance(exc, FatalJudgeError)
    assert "HTTP 404" in str(exc)


def test_wrong_key_is_fatal_and_never_leaks(fake_judge: JudgeFactory) -> None:
    guarded = fake_judge(require_api_key="sk-the-right-key")
    assert complete(client(guarded.url, api_key="sk-the-right-key")).text
    wrong = client(guarded.url)  # the sentinel key
    exc = raised(wrong)
    assert isinstance(exc, FatalJudgeError)
    assert str(exc) == f"judge {MODEL}: HTTP 401: Incorrect API key."
    assert SENTINEL not in repr(wrong)
    assert guarded.authorization_headers() == {"Bearer sk-the-right-key", f"Bearer {SENTINEL}"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_refused_connection_and_dns_failure() -> None:
    exc = raised(client(f"http://127.0.0.1:{_free_port()}/v1"))
    assert isinstance(exc, ConnectionFailed)
    assert MODEL in str(exc)
    exc = raised(client("http://no-such-host.invalid/v1"))
    assert isinstance(exc, ConnectionFailed)


def test_outage_is_a_connection_failure_then_recovers(server: FakeJudgeServer) -> None:
    c = client(server.url)

    async def go() -> tuple[BaseException | None, str]:
        await c.complete(MESSAGES, schema_name=VERDICTS_SCHEMA_NAME, schema=VERDICTS_SCHEMA)
        await asyncio.to_thread(server.refuse_connections, 600)  # pooled connection dropped
        failure: BaseException | None = None
        try:
            await c.complete(MESSAGES, schema_name=VERDICTS_SCHEMA_NAME, schema=VERDICTS_SCHEMA)
        except JudgeError as exc:
            failure = exc
        await asyncio.to_thread(server.accept_connections)  # the outage is over
        reply = await c.complete(MESSAGES, schema_name=VERDICTS_SCHEMA_NAME, schema=VERDICTS_SCHEMA)
        return failure, reply.text

    failure, text = asyncio.run(go())
    assert isinstance(failure, ConnectionFailed)
    assert_no_secret(failure)
    assert "verdicts" in text


# ----------------------------------------------------------------------------------------------
# answers only a hand-written server gives


def error_from(handler: Handler) -> JudgeError:
    async def go() -> JudgeError:
        async with serving(handler) as url:
            c = client(url)
            try:
                await c.complete(MESSAGES, schema_name=VERDICTS_SCHEMA_NAME, schema=VERDICTS_SCHEMA)
            except JudgeError as exc:
                return exc
            finally:
                await c.aclose()
        raise AssertionError("no error raised")

    exc = asyncio.run(go())
    assert_no_secret(exc)
    return exc


def test_retry_after_as_an_http_date() -> None:
    async def handler(request: web.Request) -> web.Response:
        later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)
        return web.json_response(
            {"error": {"message": "slow down"}},
            status=429,
            headers={"Retry-After": email.utils.format_datetime(later, usegmt=True)},
        )

    exc = error_from(handler)
    assert isinstance(exc, RateLimited)
    assert exc.retry_after is not None and 25 <= exc.retry_after <= 31


def test_parse_retry_after() -> None:
    now = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after("Thu, 01 Jan 2026 12:00:42 GMT", now) == 42.0
    assert parse_retry_after("Thu, 01 Jan 2026 11:00:00 GMT", now) == 0.0  # in the past
    for unusable in (None, "", "soon", "nan"):
        assert parse_retry_after(unusable) is None


def test_proxy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert env_proxy_for("https://api.openai.com/v1/chat/completions") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,vllm.internal")
    assert env_proxy_for("https://api.openai.com/v1") == "http://proxy.internal:3128"
    assert env_proxy_for("http://api.openai.com/v1") is None  # no HTTP_PROXY
    assert env_proxy_for("https://vllm.internal:8000/v1") is None
    assert OpenAIHTTPClient(MODEL)._proxy == "http://proxy.internal:3128"
    assert OpenAIHTTPClient(MODEL, proxy_from_env=False)._proxy is None


@pytest.mark.parametrize(
    ("status", "expected"),
    [(403, FatalJudgeError), (413, RequestRejected), (422, RequestRejected), (503, ServerError)],
)
def test_status_classes(status: int, expected: type[JudgeError]) -> None:
    async def handler(request: web.Request) -> web.Response:
        # A server that echoes the key it got: the key must still not reach the error.
        auth = request.headers.get("Authorization", "")
        return web.json_response({"error": {"message": f"nope for {auth}"}}, status=status)

    exc = error_from(handler)
    assert type(exc) is expected
    assert f"HTTP {status}: nope for Bearer ***" in str(exc)


def test_redirect_is_fatal() -> None:
    async def handler(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect("https://example.invalid/v1/chat/completions")

    exc = error_from(handler)
    assert isinstance(exc, FatalJudgeError)
    assert "redirect" in str(exc) and "api_base" in str(exc)


@pytest.mark.parametrize(
    "body",
    [
        b"<html>gateway page</html>",
        b'{"ok": true}',
        b'{"choices": []}',
        b'{"choices": [{"message": {"content": 42}}]}',
    ],
)
def test_a_200_that_is_not_a_chat_completion_is_malformed(body: bytes) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    exc = error_from(handler)
    assert isinstance(exc, MalformedReply)
    assert "not a chat completion" in str(exc)


def test_missing_usage_and_null_content() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": None}}]})

    async def go() -> Any:
        async with serving(handler) as url, client(url) as c:
            return await c.complete(
                MESSAGES, schema_name=REASON_SCHEMA_NAME, schema=VERDICTS_SCHEMA
            )

    reply = asyncio.run(go())
    assert (reply.text, reply.usage) == ("", Usage())


def test_dropped_connection_is_a_connection_failure() -> None:
    async def handler(request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.close()  # hang up without an answer
        return web.Response()

    exc = error_from(handler)
    assert isinstance(exc, ConnectionFailed)


# ----------------------------------------------------------------------------------------------
# event loops and concurrency


def test_repeated_asyncio_run_in_one_process(server: FakeJudgeServer) -> None:
    c = client(server.url)
    gc.collect()  # an earlier test's garbage warns here, not inside the block
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):
            assert "verdicts" in complete(c).text
            assert c._pools == {}  # the session was closed with its loop by asyncio.run
        gc.collect()
    assert [str(w.message) for w in caught] == []


def test_a_loop_closed_by_hand_leaves_no_reusable_session(server: FakeJudgeServer) -> None:
    c = client(server.url)
    gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # Closed without shutting down async generators: the session cannot be closed with
        # it, so the next run drops the stale session instead of reusing it.
        loop = asyncio.new_event_loop()
        loop.run_until_complete(
            c.complete(MESSAGES, schema_name=VERDICTS_SCHEMA_NAME, schema=VERDICTS_SCHEMA)
        )
        loop.close()
        assert len(c._pools) == 1
        assert "verdicts" in complete(c).text
        assert c._pools == {}
        gc.collect()
    # The dead loop's own socket may be reported unclosed (asyncio's warning, not ours), but
    # neither the session nor the connector is left unclosed, and nothing fails.
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "client session" in m or "connector" in m], messages
    assert server.stats()["total_requests"] == 2


def test_aclose_then_reuse(server: FakeJudgeServer) -> None:
    c = client(server.url)

    async def go() -> None:
        await c.complete(MESSAGES, schema_name=VERDICTS_SCHEMA_NAME, schema=VERDICTS_SCHEMA)
        (pool,) = c._pools.values()
        await c.aclose()
        assert pool.session.closed and c._pools == {}
        await c.aclose()  # idempotent
        await c.complete(MESSAGES, schema_name=VERDICTS_SCHEMA_NAME, schema=VERDICTS_SCHEMA)
        assert len(c._pools) == 1

    asyncio.run(go())
    assert c._pools == {}


def test_many_concurrent_requests_share_one_pool(fake_judge: JudgeFactory) -> None:
    server = fake_judge(on_request=MeetAt(4))  # answered only once 4 are in flight together
    c = client(server.url)

    async def go() -> list[Any]:
        async def one() -> Any:
            return await c.complete(
                MESSAGES, schema_name=VERDICTS_SCHEMA_NAME, schema=VERDICTS_SCHEMA
            )

        replies = await asyncio.gather(*(one() for _ in range(500)))
        assert len(c._pools) == 1
        return replies

    replies = asyncio.run(go())
    assert len(replies) == 500
    assert all(json.loads(r.text)["verdicts"][2]["v"] == "yes" for r in replies)
    stats = server.stats()
    assert stats["total_requests"] == 500 and stats["by_status"] == {"200": 500}
    assert stats["max_in_flight"] >= 4
