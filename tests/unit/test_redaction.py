"""The API key is taken out of error text in any case and in its common encodings
(scorer_core.redaction), on both transports' error paths."""

from __future__ import annotations

import asyncio
import base64
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import web

from scorer_core.errors import JudgeError
from scorer_core.litellm_client import translate_error
from scorer_core.openai_http import OpenAIHTTPClient
from scorer_core.prompt import VERDICTS_SCHEMA_NAME, verdicts_schema
from scorer_core.protocols import RequestSettings
from scorer_core.redaction import redact
from tests.support.http import serving

KEY = "sk-Proj_a1B2c3/d4+E5=f6"


def echoes(key: str) -> list[str]:
    raw = key.encode()
    return [
        key,
        key.upper(),
        key.lower(),
        quote(key, safe=""),
        quote(key, safe="").lower(),
        base64.b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode(),
        base64.b64encode(b"user:" + raw).decode(),  # Authorization: Basic
        base64.b64encode(b"x:" + raw + b"!").decode(),
        base64.b64encode(b":" + raw).decode(),
        raw.hex(),
        raw.hex().upper(),
    ]


@pytest.mark.parametrize("form", range(12))
def test_every_common_encoding_of_the_key_is_redacted(form: int) -> None:
    echoed = echoes(KEY)[form]
    text = f"401: bad credentials [{echoed}] for this request"
    out = redact(text, KEY)
    assert "***" in out and out.startswith("401: bad credentials [")
    for other in echoes(KEY):
        # no run of 8 characters of any encoded form survives
        assert not any(other[i : i + 8] in out for i in range(0, max(1, len(other) - 8)))


def test_nothing_else_is_touched() -> None:
    assert redact("no secret here", KEY) == "no secret here"
    assert redact("text", None) == "text"
    assert redact("keys abc and ABC", "abc") == "keys *** and ABC"  # too short for encodings


def test_the_http_client_redacts_an_upper_cased_echo() -> None:
    async def handler(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        basic = base64.b64encode(f"user:{KEY}".encode()).decode()
        return web.json_response(
            {"error": {"message": f"nope {auth.upper()} basic {basic} {quote(KEY, safe='')}"}},
            status=403,
        )

    async def go() -> Any:
        async with serving(handler) as url:
            client = OpenAIHTTPClient(
                "openai/j", RequestSettings(api_base=url, api_key=KEY, timeout=5)
            )
            return await client.complete(
                [{"role": "user", "content": "x"}],
                schema_name=VERDICTS_SCHEMA_NAME,
                schema=verdicts_schema([0]),
            )

    with pytest.raises(JudgeError) as caught:
        asyncio.run(go())
    text = str(caught.value)
    assert "nope BEARER ***" in text and "basic dXNlcjp***" in text  # "user:" kept
    assert base64.b64encode(f"user:{KEY}".encode()).decode()[8:20] not in text
    assert KEY.upper() not in text and quote(KEY, safe="") not in text


def test_litellm_errors_are_redacted_the_same_way() -> None:
    error = translate_error(
        RuntimeError(
            f"failed with KEY={KEY.upper()} b64={base64.b64encode(KEY.encode()).decode()}"
        ),
        "openai/j",
        KEY,
    )
    assert KEY.upper() not in str(error) and "b64=***" in str(error)
