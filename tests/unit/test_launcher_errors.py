"""A failed benchmark job says its cause: the launchers' real failure texts (tests/fixtures/launcher/,
captured from Open MPI, OpenSSH, srun, dash and bash) recognised as one line with a remedy, and the
most telling stderr lines (never a row of dashes) when nothing is recognised."""

from __future__ import annotations

import pytest

from healthcheck import benchmarks
from healthcheck.benchmarks import BenchContext
from healthcheck.benchmarks.grade import JobOutcome, grade_job
from healthcheck.benchmarks.launcher_errors import parse_launcher_errors, telling_lines
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import Status
from healthcheck.core.profiles import EMPTY_PROFILE
from tests.conftest import corpus_text, fixture_text

CASES = [
    ("mpirun-as-root.err", "mpirun refuses to run as root: --allow-run-as-root not given "
                           "(launcher setting allow_run_as_root: true)", None, "allow_run_as_root: true"),
    ("mpirun-not-enough-slots.err", "mpirun: not enough slots for the 4 ranks requested", None, "slots="),
    ("mpirun-executable-not-found.err", "mpirun: executable nosuchbin_hc not found on vm", "vm", "binary"),
    ("mpirun-ssh-connection-refused.err", "ssh from the launcher to 127.0.1.201 failed: Connection refused",
     "127.0.1.201", "sshd runs on the node"),
    ("mpirun-ssh-permission-denied.err", "ssh from the launcher to root@127.0.1.2: Permission denied (publickey)",
     "root@127.0.1.2", "authorized_keys"),
    ("mpirun-ssh-host-key-verification-failed.err", "ssh from the launcher to [127.0.1.2]:35045: host key not in "
     "the launcher's known_hosts (Host key verification failed)", "[127.0.1.2]:35045", "known_hosts"),
    ("mpirun-ssh-agent-refused.err", 'ssh from the launcher: the ssh agent refused to sign with key root@vm '
     "(agent refused operation)", None, "IdentityFile"),
    ("srun-no-configuration.err", "srun: Could not establish a configuration source", None, "SLURM_CONF"),
    ("launch-script-workdir-missing.err", "cannot create the job work dir on the launcher host: /nonexistent/"
     "scratch: No such file or directory", None, "workdir"),
    ("launch-script-mpirun-not-found-dash.err", "/opt/hpcx/ompi/bin/mpirun: command not found on the launcher host",
     None, "full path"),
    ("launch-script-mpirun-not-found-bash.err", "/opt/hpcx/ompi/bin/mpirun: no such file on the launcher host",
     None, "full path"),
]


@pytest.mark.parametrize(("name", "message", "node", "remedy"), CASES)
def test_each_real_failure_is_recognised_first(name: str, message: str, node: str | None, remedy: str) -> None:
    errors = parse_launcher_errors(fixture_text(f"launcher/{name}"))
    assert errors[0].message == message
    assert errors[0].node == node
    assert remedy in (errors[0].remedy or "")


def test_ssh_causes_come_before_the_daemon_banner() -> None:
    errors = parse_launcher_errors(fixture_text("launcher/mpirun-ssh-agent-refused.err"))
    assert [e.message for e in errors] == [
        "ssh from the launcher: the ssh agent refused to sign with key root@vm (agent refused operation)",
        "ssh from the launcher to root@127.0.1.2: Permission denied (publickey)",
        "mpirun: could not start its daemons (orted)"]


def test_slots_from_the_corpus_and_without_a_count() -> None:
    slots = parse_launcher_errors(corpus_text("nccl-tests/mpirun-not-enough-slots-abort-gcm.txt"))
    assert slots[0].message == "mpirun: not enough slots for the 16 ranks requested"
    assert parse_launcher_errors("There are not enough slots available in the system\n")[0].message == \
        "mpirun: not enough slots for the ranks requested"


def test_telling_lines_skip_separators_and_the_setpgid_warning() -> None:
    text = ("[vm:17436] plm:rsh: Warning: setpgid(17441,17441) failed in parent with errno=Permission denied(13)\n"
            "--------------------------------------------------------------------------\n\n"
            "HPL ERROR: CUBLAS initialization failed\ncorrupted size vs. prev_size\n"
            "--------------------------------------------------------------------------\n")
    assert telling_lines(text) == "HPL ERROR: CUBLAS initialization failed"
    assert telling_lines("----\nsome text\nlast words\n=====\n") == "some text | last words"
    assert telling_lines("-----\n\n") == ""


def _outcome(stderr: str, rc: int, stdout: str = "") -> JobOutcome:
    job = Job("hpl-hpl-cluster-2nodes-node01", "hpl", "hpl", "cluster", ("node01", "node02"), 1)
    return JobOutcome(job=job, launcher="node01", command="", rc=rc, timed_out=False, transport_error=None,
                      duration_s=0.5, stdout=stdout, stderr=stderr)


def _grade(outcome: JobOutcome) -> list:
    findings, _ = grade_job(outcome, benchmarks.get(outcome.job.benchmark), BenchContext(EMPTY_PROFILE, {}, {}))
    return findings


def test_a_job_refused_as_root_says_so_on_every_host() -> None:
    findings = _grade(_outcome(fixture_text("launcher/mpirun-as-root.err"), 1))
    assert [(f.host, f.check, f.status) for f in findings] == [("node01", "hpl.job", Status.ERROR),
                                                              ("node02", "hpl.job", Status.ERROR)]
    assert findings[0].message == ("cluster (2 nodes): launch failed: mpirun refuses to run as root: "
                                   "--allow-run-as-root not given (launcher setting allow_run_as_root: true)")
    assert "allow_run_as_root: true" in (findings[0].remedy or "")


@pytest.mark.parametrize("bench", ["nccl", "imb"])
def test_every_benchmark_names_the_launch_cause(bench: str) -> None:
    job = Job(f"{bench}-x-pair-node01-node02", bench, "all_reduce_perf" if bench == "nccl" else "IMB-MPI1", "pair",
              ("node01", "node02"), 1)
    outcome = JobOutcome(job=job, launcher="node01", command="", rc=97, timed_out=False, transport_error=None,
                         duration_s=0.1, stdout="", stderr=fixture_text("launcher/launch-script-workdir-missing.err"))
    [first, *_] = _grade(outcome)
    assert first.status is Status.ERROR and "cannot create the job work dir on the launcher host: " \
        "/nonexistent/scratch: No such file or directory" in first.message
    assert "workdir" in (first.remedy or "")


def test_an_unknown_failure_shows_its_telling_lines_not_the_first_one() -> None:
    stderr = ("--------------------------------------------------------------------------\n"
              "some banner text\nxhpl: error while loading shared libraries: libcublas.so.12: cannot open shared "
              "object file: No such file or directory\n"
              "--------------------------------------------------------------------------\n")
    [first, _] = _grade(_outcome(stderr, 127))
    assert first.message == ("cluster (2 nodes): exited with rc 127: xhpl: error while loading shared libraries: "
                             "libcublas.so.12: cannot open shared object file: No such file or directory "
                             "(unreadable output: no HPL banner, result row or error in the output)")
    [silent, _] = _grade(_outcome("", 1))
    assert silent.message == ("cluster (2 nodes): unreadable output: no HPL banner, result row or error in the "
                              "output (rc 1; nothing on stderr)")
