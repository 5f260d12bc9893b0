"""Text from users, made safe for where it goes: `unencodable` finds what UTF-8 cannot encode
(a lone surrogate JSON can carry), `escaped` spells it losslessly, and `terminal_safe` shows a
value as one printable line (control characters escaped: a value cannot recolour a terminal)."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any


def encodable(text: str) -> bool:
    """Whether UTF-8 can encode `text` (no lone surrogate)."""
    return unencodable(text) is None


def escaped(text: str) -> str:
    """`text`, or when unencodable its lossless escape (backslashes doubled, `\\uXXXX`)."""
    if encodable(text):
        return text
    return text.replace("\\", "\\\\").encode("utf-8", "backslashreplace").decode("utf-8")


def unencodable(value: Any) -> str | None:
    """Where in `value` (text, lists, mappings) UTF-8 cannot encode ("element 2: a lone ...")."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")  # the common case, at C speed
        except UnicodeEncodeError as exc:
            code = ord(value[exc.start])
            kind = "a lone surrogate" if 0xD800 <= code <= 0xDFFF else "a character"
            return f"{kind} U+{code:04X} at character {exc.start}"
        return None
    if isinstance(value, list | tuple):
        for position, element in enumerate(value):
            found = unencodable(element)
            if found is not None:
                return f"element {position}: {found}"
    if isinstance(value, Mapping):
        for key, element in value.items():
            found = unencodable(key) if isinstance(key, str) else None
            found = found or unencodable(element)
            if found is not None:
                return f"key {escaped(str(key))!r}: {found}"
    return None


def terminal_safe(value: object) -> str:
    """`str(value)` as one printable line: control and unencodable characters escaped."""
    text = str(value)
    if text.isprintable() and encodable(text):
        return text
    return "".join(_char_safe(char) for char in text)


def _char_safe(char: str) -> str:
    if char.isprintable() and encodable(char):
        return char
    if unicodedata.category(char) == "Zs":
        return char  # a plain space of another width prints as a space
    code = ord(char)
    if code < 0x100:
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char, f"\\x{code:02x}")
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
