"""The input columns a run carries into its tables (`input.carry`): their Arrow types, decided
once from the first file, and every row's values checked against them (`conform`): nothing
is cast silently, a value of another type is that row's error naming the column.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import polars as pl
import pyarrow as pa

from jobs.core.schema import CarriedColumn
from scorer_core.errors import ConfigError, InputError

Conformer = Callable[[Any], Any]
"""A value -> the value to store; raises `ValueError` (the reason) when it does not fit."""


def carried_columns(
    carry: Sequence[str], into_verdicts: Sequence[str], types: Mapping[str, pa.DataType]
) -> tuple[CarriedColumn, ...]:
    """The run's carried columns in `carry` order, with the types decided for them."""
    return tuple(
        CarriedColumn(name, types[name], into_verdicts=name in into_verdicts) for name in carry
    )


def decide_type(name: str, found: pa.DataType, where: str) -> pa.DataType:
    """The type to carry column `name` as; `InputError` when the published tables cannot hold it."""
    if pa.types.is_dictionary(found):
        found = found.value_type
    if pa.types.is_null(found):
        return pa.string()
    try:
        pl.from_arrow(pa.array([], type=found))
    except Exception as exc:
        raise InputError(
            f"carried column {name!r} in {where} is {found}, which the published tables cannot "
            f"hold ({type(exc).__name__}); carry another column or convert it"
        ) from None
    return found


def infer_json_type(name: str, values: Sequence[Any], where: str) -> pa.DataType:
    """The type of column `name` from its sampled JSON values; `InputError` when they differ."""
    present = [value for value in values if value is not None]
    if not present:
        return pa.string()
    try:
        found = pa.array(present).type
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        kinds = sorted({type(value).__name__ for value in present})
        raise InputError(
            f"carried column {name!r} has values of different kinds in the first rows of "
            f"{where} ({', '.join(kinds)}); a carried column needs one type"
        ) from None
    return decide_type(name, found, where)


def check_segment_columns(by: Sequence[str], carried: Sequence[CarriedColumn]) -> None:
    """`ConfigError` unless every `summary.by` column is a carried column of a scalar type."""
    need = "a segment needs a column of single values (text, number, boolean, date)"
    check_carried("summary.by", by, carried, lambda found: not pa.types.is_nested(found), need)


def check_carried(
    option: str,
    names: Sequence[str],
    carried: Sequence[CarriedColumn],
    usable: Callable[[pa.DataType], bool],
    need: str,
) -> None:
    """`ConfigError` naming `option` unless every column of `names` is carried and `usable`."""
    types = {column.name: column.type for column in carried}
    for name in names:
        found = types.get(name)
        if found is None:
            raise ConfigError(f"{option}: {name!r} is not a carried column (input.carry)")
        if not usable(found):
            raise ConfigError(f"{option}: column {name!r} is {found}; {need}")


def conform(column: CarriedColumn, value: Any) -> Any:
    """`value` as stored in column `column`; `ValueError` saying why when it does not fit."""
    return None if value is None else _conformer(column.type)(value)


@functools.cache
def _conformer(target: pa.DataType) -> Conformer:
    """A fast check for the common scalar types; Arrow's own conversion for the others."""
    if pa.types.is_string(target) or pa.types.is_large_string(target):
        return _checker(target, str)
    if pa.types.is_boolean(target):
        return _checker(target, bool)
    if pa.types.is_integer(target):
        bits = target.bit_width - pa.types.is_signed_integer(target)
        low = -(1 << bits) if pa.types.is_signed_integer(target) else 0
        return _checker(target, int, refuse=bool, bounds=(low, (1 << bits) - 1))
    if pa.types.is_floating(target):
        return _checker(target, int | float, refuse=bool, convert=float)
    if pa.types.is_date(target):
        return _checker(target, dt.date, refuse=dt.datetime)

    def by_arrow(value: Any) -> Any:
        try:
            pa.array([value], type=target)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise ValueError(f"{_wrong(value, target)} ({exc})") from None
        return value

    return by_arrow


def _checker(
    target: pa.DataType,
    takes: Any,
    *,
    refuse: Any = (),
    bounds: tuple[int, int] | None = None,
    convert: Callable[[Any], Any] | None = None,
) -> Conformer:
    """Values of the types `takes` (not `refuse`), within `bounds`, converted by `convert`."""

    def check(value: Any) -> Any:
        if isinstance(value, refuse) or not isinstance(value, takes):
            raise ValueError(_wrong(value, target))
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            raise ValueError(f"is {value}, out of the range of {target}")
        return value if convert is None else convert(value)

    return check


def _wrong(value: Any, target: pa.DataType) -> str:
    return f"is a {type(value).__name__}, expected {target}"
