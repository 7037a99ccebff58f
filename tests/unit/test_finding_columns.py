"""``findings_from_columns``: findings rebuilt from columns are the findings ``Finding(*row)`` gives."""

from __future__ import annotations

import dataclasses
import math
from operator import attrgetter

import pytest

from healthcheck.core.model import Finding, Status, findings_from_columns

FIELDS = tuple(f.name for f in dataclasses.fields(Finding))
FINDINGS = [
    Finding(host="gpu001", check="gpu.temperature", status=Status.FAIL,
            message="gpu3: temperature 91 C, expected <= 87 C", component="gpu3", value=91, expected="<= 87 C",
            unit="C", remedy="Check the airflow", source="nvidia-smi-q-x"),
    Finding(host="gpu001", check="gpu.count", status=Status.PASS, message="8 GPUs", value=8.0, expected="== 8"),
    Finding(host="gpu002", check="ib.counter.symbol_error", status=Status.WARN, message="nan", value=math.inf,
            observe=True),
    Finding(host="gpu002", check="host.reachable", status=Status.ERROR, message="ssh: timed out", value=None),
]


def _columns(findings: list[Finding], fields: tuple[str, ...] = FIELDS) -> list[tuple[object, ...]]:
    return list(zip(*map(attrgetter(*fields), findings), strict=True))


def test_rebuilt_findings_equal_the_originals_field_by_field() -> None:
    rebuilt = findings_from_columns(_columns(FINDINGS))
    assert rebuilt == FINDINGS
    assert [f.value for f in rebuilt] == [91, 8.0, math.inf, None]
    assert type(rebuilt[1].value) is float and rebuilt[2].observe is True
    assert [hash(f) for f in rebuilt] == [hash(f) for f in FINDINGS]


def test_rebuilt_findings_stay_frozen() -> None:
    rebuilt = findings_from_columns(_columns(FINDINGS))
    with pytest.raises(dataclasses.FrozenInstanceError):
        rebuilt[0].status = Status.PASS  # type: ignore[misc]
    assert dataclasses.replace(rebuilt[0], status=Status.PASS).status is Status.PASS


def test_trailing_columns_left_out_take_their_defaults() -> None:
    without_observe = FIELDS[:-1]
    rebuilt = findings_from_columns(_columns(FINDINGS, without_observe))
    assert [f.observe for f in rebuilt] == [False, False, False, False]
    assert rebuilt[0] == FINDINGS[0] and rebuilt[3] == FINDINGS[3]


def test_no_columns_no_findings_and_bad_shapes_are_refused() -> None:
    assert findings_from_columns([]) == []
    columns = _columns(FINDINGS)
    with pytest.raises(ValueError, match="shorter"):
        findings_from_columns([*columns[:-1], columns[-1][:2]])
    with pytest.raises(TypeError, match="message"):
        findings_from_columns(columns[:3])
    with pytest.raises(TypeError):
        findings_from_columns([*columns, columns[0]])
