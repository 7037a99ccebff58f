"""jsoncodec: orjson writes observations and findings as the reference conversion (``to_jsonable``) does,
non-finite floats as null, and what orjson refuses still becomes JSON through the standard library."""

from __future__ import annotations

import enum
import json
import math
import types
from dataclasses import dataclass, field
from datetime import date, datetime, timezone

from hypothesis import given
from hypothesis import strategies as st

from healthcheck.core.model import Finding, Status
from healthcheck.store.jsoncodec import dumps, json_lines, plain, to_jsonable


class Mode(str, enum.Enum):
    ENABLED = "Enabled"


@dataclass(frozen=True)
class Link:
    port: int
    speed_gbps: float | None
    state: Mode = Mode.ENABLED


@dataclass(frozen=True)
class Gpu:
    index: int
    links: tuple[Link, ...] = ()
    clock_events: frozenset[str] = frozenset()
    by_bus: dict = field(default_factory=dict)


def reference(value):
    """What the standard library writes from ``to_jsonable`` (the pre-orjson path), read back."""
    return json.loads(json.dumps(to_jsonable(value), allow_nan=False))


def test_dataclasses_enums_tuples_and_keys_as_the_reference_conversion_writes_them():
    gpu = Gpu(index=3, links=(Link(0, 26.562), Link(1, None)), clock_events=frozenset({"sw_power_cap"}),
              by_bus={7: "0000:19:00.0", "x": types.MappingProxyType({"a": (1, 2)})})
    assert plain({"gpu": gpu}) == reference({"gpu": gpu}) == {"gpu": {
        "index": 3, "links": [{"port": 0, "speed_gbps": 26.562, "state": "Enabled"},
                              {"port": 1, "speed_gbps": None, "state": "Enabled"}],
        "clock_events": ["sw_power_cap"], "by_bus": {"7": "0000:19:00.0", "x": {"a": [1, 2]}}}}
    assert dumps({"status": Status.FAIL, "t": (1.5, True)}) == b'{"status":"FAIL","t":[1.5,true]}'


def test_dates_and_times_as_the_reference_conversion_writes_them():
    """orjson would write RFC 3339 ("2026-11-24T10:00:00+00:00"); the reference conversion writes str()."""
    value = {"at": datetime(2026, 11, 24, 10, 0, tzinfo=timezone.utc), "day": date(2026, 11, 24)}
    assert plain(value) == reference(value) == {"at": "2026-11-24 10:00:00+00:00", "day": "2026-11-24"}
    assert json.loads(dumps(value)) == reference(value)


def test_non_finite_floats_are_null_on_both_paths():
    value = {"temp_c": float("nan"), "peak": [float("inf"), -float("inf"), 2.0]}
    assert plain(value) == reference(value) == {"temp_c": None, "peak": [None, None, 2.0]}
    assert to_jsonable(float("nan")) is None


def test_what_orjson_refuses_is_written_by_the_standard_library():
    """An integer past 64 bits (a node printed 99999999999999999999999) and a lone surrogate: orjson
    raises, the fallback writes them (ASCII, escaped), and the document still reads back whole."""
    value = {"count": 99999999999999999999999, "text": "bad \udce2 byte", "temp": float("nan")}
    data = dumps(value)
    assert data.isascii()
    assert json.loads(data) == {"count": 99999999999999999999999, "text": "bad \udce2 byte", "temp": None}
    back = plain(value)  # in memory: the exact integer, never orjson's float reading of it
    assert back == {"count": 99999999999999999999999, "text": "bad \udce2 byte", "temp": None}
    assert type(back["count"]) is int


def test_json_lines_sorted_one_per_line_non_ascii_as_utf8():
    findings = [Finding(host="gpu001", check="gpu.temp", status=Status.WARN, message="GPU 3 at 91 °C",
                        value=91, expected=87, unit="C"),
                Finding(host="gpu001", check="gpu.count", status=Status.PASS, message="8 GPUs", value=8,
                        expected=8)]
    data = json_lines([f.to_json() for f in findings])
    lines = data.decode("utf-8").splitlines()
    assert len(lines) == 2 and data.endswith(b"\n")
    assert [json.loads(line) for line in lines] == [f.to_json() for f in findings]
    assert lines[0].startswith('{"check":"gpu.temp","component":"node","expected":87,"host":"gpu001"')
    assert "91 °C" in lines[0]
    big = json_lines([{"b": 2**70, "a": 1}])
    assert big == b'{"a":1,"b":1180591620717411303424}\n'


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=6) | st.integers(0, 99), inner, max_size=4)
    | st.builds(Link, st.integers(0, 17), st.none() | st.floats(allow_nan=False, allow_infinity=False)),
    max_leaves=25)


@given(json_values)
def test_plain_matches_the_reference_conversion(value):
    assert plain(value) == reference(value)  # st.text() draws lone surrogates too: the fallback's case


def test_loads_reads_as_the_standard_library_does():
    from healthcheck.store.jsoncodec import loads

    assert loads(b'{"a": [1, 2.5, null, "x"]}') == {"a": [1, 2.5, None, "x"]}
    assert loads(b'{"big": 123456789012345678901234567890}') == {"big": 123456789012345678901234567890}
    assert math.isnan(loads(b'{"v": NaN}')["v"])
    # 19 digits and more, anywhere in the text, are read exactly (orjson gives a float past 64 bits)
    assert loads(b'[1, 18446744073709551616]') == [1, 18446744073709551616]
    assert loads(b'{"a": "x", "b": -9223372036854775809}') == {"a": "x", "b": -9223372036854775809}
    assert loads(b'[123456789012345678, 1.5]') == [123456789012345678, 1.5]  # 18 digits: orjson's own read


@given(st.lists(st.integers(min_value=-(10 ** 30), max_value=10 ** 30)))
def test_loads_reads_every_integer_exactly(numbers):
    from healthcheck.store.jsoncodec import loads

    assert loads(json.dumps(numbers).encode()) == numbers
