"""The fake judge's rate limits: sliding windows on requests and on tokens, as a provider has.

`RequestLimits.admit` admits a request now, returning the `x-ratelimit-*` headers a provider
sends with its reply, or refuses it with a 429 (`WireError`) whose headers say when there will be
room again (and a `Retry-After`, unless the fake is told to leave it out). Not locked: the fake
judge that owns it admits under its own lock.
"""

from __future__ import annotations

import math
from collections import deque

from tests.fake_judge.wire import rate_limit_error


def max_in_window(timestamps: list[float], window_s: float) -> int:
    """Largest number of timestamps in any half-open window (t - window_s, t]; sorted input."""
    best = 0
    lo = 0
    for hi, t in enumerate(timestamps):
        while timestamps[lo] <= t - window_s:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


class RequestLimits:
    """At most `limit` requests and `token_limit` tokens per `window_s` (0 = unlimited)."""

    def __init__(self) -> None:
        self.limit = 0
        self.window_s = 60.0
        self.token_limit = 0
        self._window: deque[float] = deque()  # admitted requests still inside the window
        self._token_window: deque[tuple[float, int]] = deque()  # (admitted at, tokens)
        self._tokens_in_window = 0

    def set_rpm(self, limit: int, window_s: float | None = None) -> None:
        if limit < 0:
            raise ValueError("limit must be >= 0")
        if window_s is not None and window_s <= 0:
            raise ValueError("window_s must be > 0")
        self.limit = int(limit)
        if window_s is not None:
            self.window_s = float(window_s)

    def set_tpm(self, limit: int) -> None:
        if limit < 0:
            raise ValueError("limit must be >= 0")
        self.token_limit = int(limit)

    def admit(self, now: float, tokens: int, retry_after_header: bool) -> dict[str, str]:
        """Admit a request of `tokens` at `now` and record it, returning the reply's limit
        headers; or raise the 429 a provider sends when a window is full."""
        self._expire(now)
        refusal = self._refusal(now, tokens)
        if refusal is not None:
            if retry_after_header:
                reset = max(float(v.removesuffix("s")) for k, v in refusal.items() if "reset" in k)
                refusal["Retry-After"] = str(max(1, math.ceil(reset)))
            raise rate_limit_error(refusal, "rate_limited")
        self._window.append(now)
        self._token_window.append((now, tokens))
        self._tokens_in_window += tokens
        headers: dict[str, str] = {}
        if self.limit > 0:
            headers["x-ratelimit-limit-requests"] = str(self.limit)
            headers["x-ratelimit-remaining-requests"] = str(self.limit - len(self._window))
        if self.token_limit > 0:
            headers["x-ratelimit-limit-tokens"] = str(self.token_limit)
            headers["x-ratelimit-remaining-tokens"] = str(
                max(0, self.token_limit - self._tokens_in_window)
            )
        return headers

    def _expire(self, now: float) -> None:
        horizon = now - self.window_s
        while self._window and self._window[0] <= horizon:
            self._window.popleft()
        while self._token_window and self._token_window[0][0] <= horizon:
            self._tokens_in_window -= self._token_window.popleft()[1]

    def _refusal(self, now: float, tokens: int) -> dict[str, str] | None:
        """The limit headers of a 429 when a window has no room for this request, else None."""
        limit, token_limit = self.limit, self.token_limit
        if limit > 0 and len(self._window) >= limit:
            wait = self._window[0] + self.window_s - now
            return {
                "x-ratelimit-limit-requests": str(limit),
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": f"{wait:.3f}s",
            }
        if token_limit > 0 and self._tokens_in_window + tokens > token_limit:
            # Wait until enough of the window's tokens have aged out for this request.
            freed, wait = self._tokens_in_window, self.window_s
            for admitted, spent in self._token_window:
                freed -= spent
                if freed + tokens <= token_limit:
                    wait = admitted + self.window_s - now
                    break
            return {
                "x-ratelimit-limit-tokens": str(token_limit),
                "x-ratelimit-remaining-tokens": str(max(0, token_limit - self._tokens_in_window)),
                "x-ratelimit-reset-tokens": f"{wait:.3f}s",
            }
        return None
