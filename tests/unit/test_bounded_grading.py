"""Bounded grading (issue 29.9): every parser refuses a digit run as a ParseError, parses long lines in
linear time, and a parser that still runs away costs its host one ERROR naming the command.

The hostile inputs are built here from the real layouts the fuzzer seeds with (``tests/fuzzing.py``): a
number turned into a 5,000-digit run (``int()`` refuses more than 4,300 digits with a plain
``ValueError``), a 2 MB ``NCCL INFO`` line, a 2 MB ib-sysfs line. Each long parse runs under a generous
watchdog (minutes, for work that is milliseconds when linear and hours when quadratic): a hang fails
the test instead of stalling it. The runaway parser is a catastrophic regex, ``(a+)+$``.
"""

from __future__ import annotations

import dataclasses
import re
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from healthcheck.benchmarks.nccl_transport import parse_nccl_transport
from healthcheck.core.model import CommandResult, Finding, Host, HostCollection, Status
from healthcheck.core.profiles import EMPTY_PROFILE
from healthcheck.core.spec import EvalContext, ParseError, ProbeSpec
from healthcheck.probes.ib_parse import parse_ib_sysfs, parse_ibstat
from healthcheck.run.fanout import Runner
from healthcheck.run.gradepool import GradeJob, grade_hosts
from healthcheck.run.stages import grade_host
from tests.fuzzing import targets

WATCHDOG_S = 120
DIGITS = "7" * 5000
_NUMBER = re.compile(r"\d+")


@contextmanager
def watchdog(seconds: int = WATCHDOG_S) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still parsing after {seconds} s: not linear")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)  # again every second: a swallowed one comes back
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(("label", "check", "seeds"), targets(), ids=[t[0] for t in targets()])
def test_a_digit_run_is_a_parse_error_never_a_crash(label: str, check: Callable[[str], str],
                                                   seeds: tuple[str, ...]) -> None:
    """Each of the first numbers of every seed layout, in turn, turned into 5,000 digits."""
    outcomes = set()
    for seed in seeds[:3]:
        for m in list(_NUMBER.finditer(seed))[:12]:
            outcomes.add(check(seed[:m.start()] + DIGITS + seed[m.end():]))  # raises on any other exception
    assert outcomes <= {"parse-error", "parsed"}


def test_a_long_nccl_info_line_is_read_in_linear_time() -> None:
    """A 60 KB NCCL INFO line made the sample's replay take 72 s (an unanchored regex searched each line)."""
    lines = ["gpu01:1234:1234 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>",
             "x" * 2_000_000 + " NCCL INFO nothing",                                       # no host before it
             "gpu02:1:1 [0] NCCL INFO NET/IB : Using " + " " * 2_000_000 + "[0]mlx5_2:1/IB",
             "gpu03:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send]" + " via NET/x" * 200_000 + " via NET/IB/0",
             "{" * 2_000_000 + ":1:2 [0] NCCL INFO Using network IB"]
    with watchdog():
        net = parse_nccl_transport("\n".join(lines))
    assert net.info_lines == 5
    assert net.by_host["gpu01"].ib_devices == ("mlx5_0:1/IB", "mlx5_1:1/IB")
    assert net.by_host["gpu02"].ib_devices == ("mlx5_2:1/IB",)
    assert (net.by_host["gpu03"].plain_channels, net.by_host["gpu03"].networks) == (1, set())
    assert sum(1 for h in net.by_host if h.startswith("{")) == 1


def test_long_ib_lines_are_read_in_linear_time_or_refused() -> None:
    """A 311 KB ib-sysfs input took 95 s (a lazy-prefix pattern tried every position of a long line)."""
    end = "\n# ib-sysfs end\n"
    hostile = "class/infiniband/mlx5_0/" * 100_000 + "rate 400 Gb/sec"   # no ':' anywhere: not a sysfs line
    with watchdog(), pytest.raises(ParseError, match="is not '<sysfs path>:<value>'"):
        parse_ib_sysfs(hostile + end)
    prefixed = "/chroot/sys/class/infiniband/mlx5_0/ports/1/state:4: ACTIVE" + end
    (dev,) = parse_ib_sysfs(prefixed)
    assert (dev.name, dev.ports[0].port, dev.ports[0].state) == ("mlx5_0", 1, "ACTIVE")
    with pytest.raises(ParseError, match="port number of 5000 digits"):
        parse_ib_sysfs(f"/sys/class/infiniband/mlx5_0/ports/{DIGITS}/state:4: ACTIVE" + end)
    with pytest.raises(ParseError, match="has 5000 digits: not a 64-bit counter"):
        parse_ib_sysfs(f"/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error:{DIGITS}" + end)
    name = "mlx5_" + "1" * 1_000_000 + "x"   # the device sort key read a trailing number by backtracking
    with watchdog():
        assert parse_ib_sysfs(f"/sys/class/infiniband/{name}/fw_ver:28.39.1002" + end)[0].fw_ver == "28.39.1002"
    spaces = "CA 'mlx5_0'\n\tPort 1:\n\t\tState: " + " " * 1_000_000 + "Active\n"
    with watchdog():
        report = parse_ibstat(spaces)
    assert report.devices[0].ports[0].state == "ACTIVE"


def _runaway_probe() -> ProbeSpec:
    """A probe whose parser never ends on the output ``evil`` (a catastrophic regex), and parses others."""
    def parse(outputs: dict[str, CommandResult]) -> str:
        text = outputs["runaway-cmd"].text
        if text.startswith("evil"):
            re.match(r"(a+)+$", "a" * 64 + "!")  # 2**64 steps: only a bound ends it
        return text

    def evaluate(observations: str, ctx: EvalContext) -> list[Finding]:
        return [Finding(host=ctx.host.name, check="runaway.ok", status=Status.PASS, message=observations)]

    return ProbeSpec(name="runaway", description="test", command_map={"runaway-cmd": "true"}, parse_fn=parse,
                     evaluate_fn=evaluate)


def _collection(host: str, text: str) -> HostCollection:
    result = CommandResult(host=host, command_id="runaway-cmd", stdout=text.encode(), rc=0)
    return HostCollection(host=host, results={"runaway-cmd": result}, collected_at="2026-11-21T04:00:00+00:00")


def test_a_runaway_parse_is_an_error_naming_the_command_and_grading_goes_on() -> None:
    probes = [_runaway_probe(), dataclasses.replace(_runaway_probe(), name="after")]
    with watchdog():
        findings, observations = grade_host(Host("gpu001"), _collection("gpu001", "evil"), probes, EMPTY_PROFILE,
                                            "replay", options={"grade_timeout_s": 1})
    stopped = [f for f in findings if f.status is Status.ERROR]
    assert [(f.check, f.source, f.value) for f in stopped] == [("runaway.parse", "runaway-cmd", "> 1 s"),
                                                                ("host.grade", None, None)]
    assert stopped[0].message == ("grading stopped: parsing runaway-cmd (4 bytes) ran past 1 s (a parser that "
                                  "does not end on this output)")
    assert stopped[1].message == "not graded: the host's grading time (1 s) ran out in runaway: after"
    assert observations == {}
    fine, _ = grade_host(Host("gpu002"), _collection("gpu002", "fine"), probes, EMPTY_PROFILE, "replay",
                         options={"grade_timeout_s": 1})
    assert [f.check for f in fine if f.status is Status.PASS] == ["host.reachable", "runaway.ok", "runaway.ok"]


class _Outputs:
    """A transport that hands each host the output named in ``texts``."""

    name = "test"

    def __init__(self, texts: dict[str, str]) -> None:
        self.texts = texts

    def collect(self, host: Host, commands: object, deadline_s: float) -> HostCollection:
        return _collection(host.name, self.texts[host.name])

    def run(self, host: Host, command: str, timeout_s: float, command_id: str = "adhoc") -> CommandResult:
        raise AssertionError("not used")


def test_a_live_sweep_grades_in_the_main_thread_where_the_bound_holds(tmp_path: Path) -> None:
    """Live hosts are collected in threads and graded where ``run`` was called: one runaway host is one
    ERROR, the hosts around it are graded."""
    texts = {"gpu001": "fine", "gpu002": "evil", "gpu003": "fine"}
    probe = _runaway_probe()
    runner = Runner(_Outputs(texts), lambda host: [], forks=3, deadline_for=lambda commands: 10.0)

    def grade(host: Host, collection: HostCollection) -> Any:
        from healthcheck.store.results import HostResult

        findings, _ = grade_host(host, collection, [probe], EMPTY_PROFILE, "test", options={"grade_timeout_s": 1})
        return HostResult(name=host.name, findings=findings)

    with watchdog():
        results = runner.run([Host(h) for h in texts], grade)
    assert {h: r.verdict for h, r in results.items()} == {"gpu001": Status.PASS, "gpu002": Status.ERROR,
                                                          "gpu003": Status.PASS}


def test_one_runaway_host_does_not_stall_a_replay_graded_by_worker_processes(tmp_path: Path) -> None:
    """The replay's grading workers arm the bound in each worker: the runaway host is one ERROR, the
    others are graded (a replay of 10,000 hosts is not stalled by one)."""
    texts = {f"gpu{i:03d}": "evil" if i == 3 else "fine" for i in range(1, 9)}
    for host, text in texts.items():
        (tmp_path / "raw" / host).mkdir(parents=True)
        (tmp_path / "raw" / host / "runaway-cmd.out").write_text(text)
    job = GradeJob(tmp_path / "raw", frozenset(texts), [_runaway_probe()], {}, {"grade_timeout_s": 1}, {})
    graded: dict[str, list[Finding]] = {}
    with watchdog():
        grade_hosts(job, [Host(h) for h in texts], 2, lambda g: graded.__setitem__(g.host, g.findings))
    errors = {h: [f.check for f in fs if f.status is Status.ERROR] for h, fs in graded.items()}
    assert errors == {h: (["runaway.parse"] if h == "gpu003" else []) for h in texts}
