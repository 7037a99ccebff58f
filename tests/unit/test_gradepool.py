"""What crosses the grading workers' process boundary: ``gradepool.Graded`` through pickle."""

from __future__ import annotations

import enum
import gc
import os
import pickle
from pathlib import Path

from healthcheck.core.model import Finding, Host, Status
from healthcheck.run import gradepool
from healthcheck.run.gradepool import Graded
from healthcheck.store.gcpause import gc_paused


class Part(str, enum.Enum):
    GPU0 = "gpu0"


def _graded(host: str, value: object = 7) -> Graded:
    findings = [Finding(host=host, check="gpu.count", status=Status.PASS, message="8 GPUs, within == 8",
                        value=8, expected="== 8", unit="GPUs", source="nvidia-smi-q-x"),
                Finding(host=host, check="gpu.ecc", status=Status.FAIL, message="gpu0", component=Part.GPU0,
                        value=value, expected=float("nan"), remedy=None, observe=True)]
    return Graded(host, findings, {"versions": {"driver": "550.54", "libs": ["nccl 2.21"]}, "gpu": {"count": 8}},
                  b"member")


def test_a_graded_host_comes_back_equal() -> None:
    for value in (7, 7.5, True, None, "text", [1, "two"]):
        graded = _graded("gpu001", value)
        back = pickle.loads(pickle.dumps(graded))
        assert back.host == "gpu001" and back.member == b"member"
        assert [f.to_json() for f in back.findings] == [f.to_json() for f in graded.findings]
        assert back.key == graded.key
        assert back.findings[1].status is Status.FAIL and back.findings[1].observe is True
        assert type(back.findings[1].component) is Part  # a str subclass is never swapped for a plain str
        assert type(back.findings[1].value) is type(value)


def test_a_nodes_grading_travels_as_cells_and_arrives_as_the_same_findings() -> None:
    """A merge's taken grading is the node table's cells (Finding's field order, ``observe`` last): sent as
    they are from a worker, built in the run's process, equal to the findings they stand for."""
    from healthcheck.core.model import FINDING_FIELDS

    assert tuple(Finding.__dataclass_fields__) == (*FINDING_FIELDS, "observe")
    findings = _graded("gpu001").findings
    rows = [tuple(getattr(f, n) for n in Finding.__dataclass_fields__) for f in findings]
    cells = [list(column) for column in zip(*rows, strict=True)]
    as_cells = Graded("gpu001", [], {"gpu": {"count": 8}}, b"member", {"taken": True}, cells)
    for arrived in (pickle.loads(pickle.dumps(as_cells)), as_cells.built()):
        assert [f.to_json() for f in arrived.findings] == [f.to_json() for f in findings]
        assert arrived.findings[1].observe is True and arrived.grading == {"taken": True}
        assert arrived.columns is None
    plain = _graded("gpu001")
    assert plain.built() is plain


def test_hosts_received_share_their_repeated_strings() -> None:
    one, two = (pickle.loads(pickle.dumps(_graded(name))) for name in ("gpu001", "gpu002"))
    assert one.findings[0].message is two.findings[0].message
    assert one.findings[0].source is two.findings[0].source
    assert one.key["versions"]["driver"] is two.key["versions"]["driver"]
    assert one.key["versions"] is not two.key["versions"]  # containers are never shared
    assert one.findings[0].host == "gpu001" and two.findings[0].host == "gpu002"


def test_a_host_without_findings_crosses_too() -> None:
    back = pickle.loads(pickle.dumps(Graded("gpu001", [], {}, b"")))
    assert back == Graded("gpu001", [], {}, b"")


def test_workers_collect_garbage_while_the_run_pauses_its_collector(monkeypatch) -> None:
    def probe_gc(job: object, host: Host) -> Graded:  # inherited by the forked workers
        return Graded(host.name, [], {"gc": gc.isenabled(), "pid": os.getpid(), "frozen": gc.get_freeze_count()},
                      b"")

    monkeypatch.setattr(gradepool, "grade_one", probe_gc)
    job = gradepool.GradeJob(raw=Path("."), names=frozenset(), probes=(), profiles={}, options={}, previous={})
    got: list[Graded] = []
    with gc_paused():  # as pipeline._replay_sweep receives
        gradepool.grade_hosts(job, [Host(f"gpu{i:03d}") for i in range(20)], 2, got.append)
        assert not gc.isenabled()
    assert [g.host for g in got] == [f"gpu{i:03d}" for i in range(20)]
    assert {g.key["gc"] for g in got} == {True}
    # what a worker inherited is frozen: its full collections never walk (or write to) the run's objects
    assert min(g.key["frozen"] for g in got) > 1000 and gc.get_freeze_count() == 0
    assert os.getpid() not in {g.key["pid"] for g in got}  # graded in the workers, not here
