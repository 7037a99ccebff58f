"""Compact JSON for what a run writes at fleet scale: orjson, with the standard library as the exact fallback.

    dumps({"gpu": observations})   # b'{"gpu":{"count":8,...}}' (UTF-8 bytes)
    json_lines(finding_dicts)      # b'{"check":...}\n{"check":...}\n' (keys sorted)
    plain(observations)            # the same value as plain JSON types: dict, list, str, int, float, bool, None

Dataclasses become objects of their fields, tuples and sets arrays, enums their value, non-string keys
strings; a non-finite float (NaN, inf) becomes ``null`` (``model.finite_or_none``, the one NaN rule of
everything a run writes), as JavaScript's ``JSON.stringify`` writes it: JSON has no NaN, and a node that
printed "nan" measured nothing. The other types go through ``to_jsonable`` (here), the reference
conversion, which gives the same JSON.

orjson writes a host's observations far faster than ``to_jsonable`` and the standard library's encoder
(docs/performance.md, "JSON at fleet scale"). What orjson refuses (an integer past 64 bits, a lone
surrogate, nesting past 254 levels, a key it cannot write) is converted by ``to_jsonable`` and written by
the standard library (ASCII, ``\\u`` escapes), so every value still becomes JSON.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from operator import attrgetter
from typing import Any

import orjson

from healthcheck.core.model import Status, finite_or_none

_PLAIN = (str, int, float, bool, type(None))
_AS_IS = frozenset({str, int, bool, type(None)})  # exact types returned unchanged, without a call
_MAX_TYPES = 4096  # converters cached per type; a program defines far fewer (bounded all the same)
_CONVERTERS: dict[type, Callable[[Any], Any]] = {}


def to_jsonable(obj: Any) -> Any:
    """Observations (dataclasses, tuples, enums) as plain JSON values.

    Dispatch is by exact type, through a converter chosen once per type (``_converter``): a host's
    observations hold thousands of values, each otherwise tested against the chain of cases."""
    cls = type(obj)
    if cls in _AS_IS:
        return obj
    return (_CONVERTERS.get(cls) or _converter(cls))(obj)


def _converter(cls: type) -> Callable[[Any], Any]:
    """How values of type ``cls`` become JSON; the cases are tested in this order (subclasses included)."""
    convert: Callable[[Any], Any]
    if issubclass(cls, float):
        convert = _float
    elif issubclass(cls, _PLAIN) and cls is not Status:
        convert = _same
    elif issubclass(cls, list | tuple | set | frozenset):
        convert = _sequence
    elif issubclass(cls, Mapping):
        convert = _mapping
    elif not issubclass(cls, type) and dataclasses.is_dataclass(cls):
        convert = _fields(tuple(f.name for f in dataclasses.fields(cls)))
    elif cls is Status:
        convert = _status
    elif issubclass(cls, bytes):
        convert = _bytes
    else:
        convert = str
    if len(_CONVERTERS) < _MAX_TYPES:
        _CONVERTERS[cls] = convert
    return convert


def _float(obj: float) -> float | None:
    """A plain float; NaN/inf from a node: null (JSON has no NaN; JavaScript's ``JSON.stringify`` writes null)."""
    return finite_or_none(float(obj))


def _same(obj: Any) -> Any:
    return obj


def _status(obj: Status) -> str:
    return obj.value


def _bytes(obj: bytes) -> str:
    return obj.decode("utf-8", errors="replace")


def _sequence(obj: Any) -> list[Any]:
    return [v if type(v) in _AS_IS else to_jsonable(v) for v in obj]


def _mapping(obj: Mapping[Any, Any]) -> dict[str, Any]:
    return {k if type(k) is str else str(k): v if type(v) in _AS_IS else to_jsonable(v)
            for k, v in obj.items()}


def _fields(names: tuple[str, ...]) -> Callable[[Any], dict[str, Any]]:
    """A dataclass's fields as a dict, read with one ``attrgetter`` call."""
    if not names:
        return lambda obj: {}
    if len(names) == 1:
        name = names[0]
        return lambda obj: {name: to_jsonable(getattr(obj, name))}
    values = attrgetter(*names)
    return lambda obj: dict(zip(names, [v if type(v) in _AS_IS else to_jsonable(v) for v in values(obj)],
                                       strict=True))


_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME  # dates as to_jsonable writes them (str)
_LINE_OPTIONS = _OPTIONS | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
_STDLIB = json.JSONEncoder(separators=(",", ":"), default=str, allow_nan=False).encode


def dumps(value: Any) -> bytes:
    """``value`` as compact JSON (UTF-8)."""
    try:
        return orjson.dumps(value, default=to_jsonable, option=_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError: see the module docstring
        return _STDLIB(to_jsonable(value)).encode("ascii")


def json_lines(values: Iterable[Any]) -> bytes:
    """JSON Lines, each value on its own line with its keys sorted (a stable line for diffs and ``grep``).
    The values must be JSON already (``Finding.to_json``): anything else raises ``TypeError``."""
    return b"".join([_line(value) for value in values])


def _line(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=_LINE_OPTIONS)
    except TypeError:  # an integer past 64 bits or a lone surrogate (else TypeError again, from json)
        return json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False).encode("ascii") + b"\n"


# A run of 19 digits (an integer orjson may read inexactly) found by translating, not by a regex that retries
_DIGITS_AS_ZERO = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))
_LONG_DIGITS = b"0" * 19


def _long_digits(data: bytes) -> bool:
    return _LONG_DIGITS in data.translate(_DIGITS_AS_ZERO)


def loads(data: bytes) -> Any:
    """``data`` read as ``json.loads`` reads it: orjson, the standard library where the two could differ
    (a run of 19+ digits; NaN and Infinity literals, which orjson refuses)."""
    if not _long_digits(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def plain(value: Any) -> Any:
    """``value`` as plain JSON types, exactly as ``dumps`` writes it and ``json.loads`` reads it back."""
    try:
        return orjson.loads(orjson.dumps(value, default=to_jsonable, option=_OPTIONS))
    except TypeError:  # what orjson refuses, converted in memory (orjson would read a 64+ bit integer as a float)
        return to_jsonable(value)

