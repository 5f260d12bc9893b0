"""Take a secret (the judge's API key) out of text, however a server or a library echoed it:
the key, case-insensitively, its URL and hex encodings and its base64 forms at each of the
three alignments base64 can give it inside a longer string (`Authorization: Basic`)."""

from __future__ import annotations

import base64
import functools
import re
from urllib.parse import quote, quote_plus

REDACTED = "***"
# Shorter than this, a "secret" would redact ordinary words: such a key is not a real one.
_MIN_SECRET_CHARS = 6


def redact(text: str, secret: str | None) -> str:
    """`text` with every common encoding of `secret` replaced by `***`."""
    if not secret or len(secret) < _MIN_SECRET_CHARS:
        return text.replace(secret, REDACTED) if secret else text
    return _pattern(secret).sub(REDACTED, text)


@functools.lru_cache(maxsize=8)
def _pattern(secret: str) -> re.Pattern[str]:
    forms = sorted(set(_forms(secret)), key=len, reverse=True)
    return re.compile("|".join(re.escape(form) for form in forms), re.IGNORECASE)


def _forms(secret: str) -> list[str]:
    raw = secret.encode("utf-8", "surrogatepass")
    forms = [secret, quote(secret, safe=""), quote_plus(secret), raw.hex()]
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        for shift in range(3):
            encoded = encode(b"\0" * shift + raw).decode("ascii").rstrip("=")
            # the characters that depend on the secret alone, whatever surrounds it
            start = (0, 2, 3)[shift]
            end = len(encoded) - (1 if (shift + len(raw)) % 3 else 0)
            core = encoded[start:end]
            if len(core) >= _MIN_SECRET_CHARS:
                forms.append(core)
    return forms
