"""Live status: in-flight hosts with the slowest named, benchmark job i of n with its stage."""

from __future__ import annotations

import io

from rich.console import Console

from healthcheck.benchmarks.grade import JobOutcome
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import Finding, Host, Status
from healthcheck.run.progress import JobProgress, ProgressDisplay
from healthcheck.store.results import HostResult


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def result(name: str, status: Status) -> HostResult:
    return HostResult(name=name, findings=[Finding(host=name, check="x", status=status, message="m")])


def test_status_names_the_slowest_hosts_in_flight():
    clock = Clock()
    display = ProgressDisplay(total=5, enabled=False, clock=clock)
    for i, name in enumerate(("gpu01", "gpu02", "gpu03", "gpu04")):
        clock.now = 100.0 + i * 10
        display.on_host_start(Host(name))
    clock.now = 160.0
    assert display.status_text() == "failed 0  in flight 4  slowest: gpu01 60s, gpu02 50s, gpu03 40s"
    display.on_host_done(Host("gpu01"), result("gpu01", Status.ERROR))
    assert display.status_text() == "failed 1  in flight 3  slowest: gpu02 50s, gpu03 40s, gpu04 30s"
    assert (display.done, display.in_flight) == (1, 3)


def test_tty_rendering_shows_the_live_status():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160, color_system=None)
    clock = Clock()
    with ProgressDisplay(total=2, enabled=True, console=console, clock=clock) as display:
        display.on_host_start(Host("gpu07"))
        clock.now += 42
        display._progress.refresh()
        display.on_host_done(Host("gpu07"), result("gpu07", Status.PASS))
    assert "in flight 1  slowest: gpu07 42s" in out.getvalue()
    assert "1/2" in out.getvalue()


def job(job_id: str, shape: str, hosts: tuple[str, ...], retest_of: str | None = None) -> Job:
    return Job(job_id=job_id, benchmark="nccl", test="all_reduce_perf", shape=shape, hosts=hosts,
               ranks_per_host=8, retest_of=retest_of)


def test_benchmark_progress_counts_jobs_and_names_the_stage():
    jobs = JobProgress(enabled=False)
    first = [job("n1", "node", ("a",)), job("n2", "node", ("b",)), job("p1", "pair", ("a", "b"))]
    jobs.on_jobs_planned(len(first))
    jobs.on_job_start(first[0])
    jobs.on_job_start(first[1])
    assert jobs.status_text() == "job 2 of 3  nccl node (all_reduce_perf)  running 2  done 0"
    jobs.on_job_done(JobOutcome(job=first[0], launcher="a", command="", rc=0, timed_out=False,
                                transport_error=None, duration_s=1.0, stdout="", stderr=""))
    jobs.on_job_done(JobOutcome(job=first[1], launcher="b", command="", rc=124, timed_out=True,
                                transport_error=None, duration_s=2.0, stdout="", stderr=""))
    retest = job("r1", "pair", ("b", "c"), retest_of="p1")
    jobs.on_jobs_planned(1)
    jobs.on_job_start(retest)
    assert jobs.status_text() == "job 3 of 4  nccl pair retest (all_reduce_perf)  running 1  done 2  failed 1"


def test_isolation_jobs_name_their_round():
    jobs = JobProgress(enabled=False)
    rail = Job(job_id="i", benchmark="nccl", test="all_reduce_perf", shape="group_rail", hosts=("a", "b"),
               ranks_per_host=1, stage=703, rail="mlx5_0:1")
    jobs.on_jobs_planned(8)
    jobs.on_job_start(rail)
    assert jobs.status_text() == "job 1 of 8  nccl isolate round 3 (all_reduce_perf)  running 1  done 0"
