"""What a job's launcher (mpirun, srun, the ssh mpirun starts its daemons with, the launch script's
shell) says when the job fails, as causes an operator can act on.

    errors = parse_launcher_errors(stdout + "\\n" + stderr)
    errors[0].message   # 'mpirun refuses to run as root: --allow-run-as-root not given (launcher ...)'
    errors[0].remedy    # what to change, where
    telling_lines(stderr)   # the lines that say most when nothing is recognised (never a row of dashes)

The known failures are data (``KNOWN_FAILURES``): each is the fixed text a real tool prints, the
cause stated in one line and the remedy. The texts were taken from the tools themselves: Open MPI
4.1.4's ``mpirun`` (root, slots, executable, daemons over ssh), OpenSSH 9.2 (host key, agent,
permission denied, resolution), Slurm 22.05's ``srun`` (no configuration), dash and bash (command
not found) and the launch script's own work-dir line (``benchmarks.launch.launch_script``); the
tests replay those captures (tests/fixtures/launcher/) and reproduce several for real over the
sshd test hosts. Specific causes come before the generic consequences (``ORTE was unable to
reliably start one or more daemons`` follows every failed ssh).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class LauncherError:
    """One failure the launcher (mpirun, srun, ssh, shell) reported, with the node or rank it names."""

    message: str
    node: str | None = None
    rank: int | None = None
    timeout: bool = False
    remedy: str | None = None


@dataclass(frozen=True)
class KnownFailure:
    """A failure recognised by its fixed text: ``describe`` turns the match into the one-line cause."""

    pattern: re.Pattern[str]
    describe: Callable[[re.Match[str]], str]
    remedy: str
    node_group: str | None = None  # the named group that holds the node, when the text names one


_LAUNCHER_SETTINGS = "the launcher settings (profile settings.benchmarks.launcher, or the inventory var " \
                     "benchmarks.launcher)"
_SSH_FROM_LAUNCHER = ("mpirun starts its daemons over ssh from the launcher host (the job's first node unless "
                      "--launcher-host): ")
_MISSING_BINARY = ("Install it on every node, or give its full path: the launcher's binary in " + _LAUNCHER_SETTINGS
                   + ", the benchmark's <benchmark>.binary / binary_dir in settings.benchmarks")

KNOWN_FAILURES: tuple[KnownFailure, ...] = (
    KnownFailure(re.compile(r"mpirun has detected an attempt to run as root"),
                 lambda m: "mpirun refuses to run as root: --allow-run-as-root not given "
                           "(launcher setting allow_run_as_root: true)",
                 "Run the benchmarks as another user, or set allow_run_as_root: true in " + _LAUNCHER_SETTINGS),
    KnownFailure(re.compile(r"There are not enough slots available in the system(?: to satisfy the (?P<n>\d+))?"),
                 lambda m: f"mpirun: not enough slots for the {m['n'] + ' ' if m['n'] else ''}ranks requested",
                 "Each hostfile line gives slots=<ranks per node>; check the benchmark's ranks_per_node against "
                 "the node's GPUs, or add --oversubscribe to the launcher args"),
    KnownFailure(re.compile(r"mpirun was unable to find the specified executable(?: file.*?^Node:\s*(?P<node>\S+)\s*"
                            r"^Executable:\s*(?P<exe>\S+))?", re.S | re.M),
                 lambda m: f"mpirun: executable {m['exe']} not found on {m['node']}" if m["exe"]
                 else "mpirun: executable not found", _MISSING_BINARY, "node"),
    KnownFailure(re.compile(r"(?:^mktemp: failed to create directory via template [‘'](?P<template>[^'’\n]*)[’']: "
                            r"(?P<why>[^\n]*)\n(?:.*\n)*?)?^healthcheck: cannot create the job work dir", re.M),
                 lambda m: "cannot create the job work dir on the launcher host"
                           + (f": {m['template'].rsplit('/', 1)[0] or '/'}: {m['why']}" if m["template"] else ""),
                 "Point the launcher's workdir at a writable directory on the launcher host (a shared filesystem "
                 "when rank 0 runs elsewhere) in " + _LAUNCHER_SETTINGS + ", or fix $TMPDIR there"),
    KnownFailure(re.compile(r"^(?:-?\w*sh): (?:line )?(?:\d+: )?(?P<cmd>[^\s:]+): (?:command )?not found\s*$", re.M),
                 lambda m: f"{m['cmd']}: command not found on the launcher host", _MISSING_BINARY),
    KnownFailure(re.compile(r"^(?:-?\w*sh): (?:line )?(?:\d+: )?(?P<cmd>[^\s:]+): No such file or directory\s*$",
                            re.M),
                 lambda m: f"{m['cmd']}: no such file on the launcher host", _MISSING_BINARY),
    KnownFailure(re.compile(r"slurmstepd\S*: error: execve\(\): (?P<cmd>[^\s:]+): No such file or directory"),
                 lambda m: f"srun: {m['cmd']} not found on the node", _MISSING_BINARY),
    KnownFailure(re.compile(r"(?:^No (?P<type>\S+) host key is known for (?P<node>\S+) and you have requested "
                            r"strict checking\.\s*\n)?^Host key verification failed\.", re.M),
                 lambda m: "ssh from the launcher to " + (m["node"] or "a node")
                           + ": host key not in the launcher's known_hosts (Host key verification failed)",
                 _SSH_FROM_LAUNCHER + "add each node's host key to that user's known_hosts there (verify it; "
                 "ssh-keyscan), or launch with srun", "node"),
    KnownFailure(re.compile(r'sign_and_send_pubkey: signing failed for (?P<type>\S+) "(?P<key>[^"\n]*)" from agent: '
                            r"(?P<why>[^\n]*)"),
                 lambda m: f"ssh from the launcher: the ssh agent refused to sign with key {m['key']} ({m['why']})",
                 _SSH_FROM_LAUNCHER + "unlock or confirm the agent's key there, or give that user a key file "
                 "(IdentityFile, IdentitiesOnly yes in its ~/.ssh/config) instead of the agent"),
    KnownFailure(re.compile(r"^(?P<node>\S+): Permission denied \((?P<methods>[^)\n]*)\)", re.M),
                 lambda m: f"ssh from the launcher to {m['node']}: Permission denied ({m['methods']})",
                 _SSH_FROM_LAUNCHER + "that user's public key must be in every node's authorized_keys", "node"),
    KnownFailure(re.compile(r"^ssh: Could not resolve hostname (?P<node>\S+): (?P<why>[^\n]*)$", re.M),
                 lambda m: f"ssh from the launcher cannot resolve {m['node']}: {m['why']}",
                 "The hostfile names each node by its inventory address (host_field: address): give the nodes "
                 "addresses the launcher host resolves", "node"),
    KnownFailure(re.compile(r"^ssh: connect to host (?P<node>\S+) port \d+: (?P<why>[^\n]*)$", re.M),
                 lambda m: f"ssh from the launcher to {m['node']} failed: {m['why']}",
                 _SSH_FROM_LAUNCHER + "check that sshd runs on the node and that the launcher host can reach it",
                 "node"),
    KnownFailure(re.compile(r"^srun: fatal: (?P<why>[^\n]*)$", re.M),
                 lambda m: f"srun: {m['why']}",
                 "Run srun where the Slurm client works (SLURM_CONF, munge), e.g. --launcher-host of a login node"),
)

# Consequences Open MPI prints after the cause, kept when nothing more specific was found.
_GENERIC = (
    ("ORTE was unable to reliably start one or more daemons", "mpirun: could not start its daemons (orted)"),
    ("ORTE has lost communication with a remote daemon", "mpirun: lost contact with a remote daemon"),
    ("An ORTE daemon has unexpectedly failed", "mpirun: a remote daemon failed after launch"),
    ("mpirun was unable to launch the specified application", "mpirun: could not launch the application"),
    ("Primary job  terminated normally, but", "mpirun: a rank returned a non-zero exit code"),
)
_TIMEOUT = "The user-provided time limit for job execution has been reached"
_SIGNAL = re.compile(r"mpirun noticed that process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)")
_PROC = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(\d+)")
_SRUN = re.compile(r"^srun: error: (?:(\S+): task (\d+): )?(.*)$", re.M)


def _known(text: str) -> list[LauncherError]:
    found = []
    for failure in KNOWN_FAILURES:
        for m in failure.pattern.finditer(text):
            node = m[failure.node_group] if failure.node_group else None
            message = " ".join(failure.describe(m).split())  # a CR or stray blank from the tool's line
            found.append(LauncherError(message, node=node, remedy=failure.remedy))
    return found


def parse_launcher_errors(text: str) -> tuple[LauncherError, ...]:
    """mpirun/srun/ssh/shell failure messages in a job's output, the specific causes first."""
    found = _known(text)
    found += [LauncherError(message) for needle, message in _GENERIC if needle in text]
    if _TIMEOUT in text:
        found.append(LauncherError("mpirun: job time limit reached (job hung or ran too long)", timeout=True))
    for m in _SIGNAL.finditer(text):
        found.append(LauncherError(f"rank {m[1]} on {m[2]} exited on signal {m[3]}", node=m[2], rank=int(m[1])))
    for m in _PROC.finditer(text):
        found.append(LauncherError(f"rank {m[1]} exited with code {m[2]}", rank=int(m[1])))
    for m in _SRUN.finditer(text):
        timeout = "DUE TO TIME LIMIT" in m[3] or "time limit" in m[3].lower()
        where = f"{m[1]} task {m[2]}: " if m[1] else ""  # the message names the node, as srun's line does
        found.append(LauncherError(f"srun: {where}{m[3].strip()}", node=m[1], rank=int(m[2]) if m[2] else None,
                                   timeout=timeout))
    unique: dict[tuple[str, str | None], LauncherError] = {}
    for err in found:
        unique.setdefault((err.message, err.node), err)
    return tuple(unique.values())


def launcher_remedy(errors: tuple[LauncherError, ...] | list[LauncherError], default: str) -> str:
    """The remedy of the first recognised cause, else ``default`` (the benchmark's generic job remedy)."""
    return next((e.remedy for e in errors if e.remedy), default)


# Lines that say nothing: separators (Open MPI frames its help texts with rows of dashes), blank
# lines, and Open MPI's harmless setpgid race warning (../shared/research/mpi-on-loopback-ssh-hosts.md).
_NOISE = re.compile(r"^[\s\-=*#~_.+|]*$|plm:rsh: Warning: setpgid\(")
_TELLING = re.compile(r"error|fail|fatal|denied|not found|no such|unable|cannot|can't|refused|abort|killed|"
                      r"segmentation|timed? ?out|invalid|unknown|not permitted|out of memory", re.I)


def telling_lines(text: str, limit: int = 2, width: int = 200) -> str:
    """The lines of ``text`` that say most: the first ones naming an error, else the last ones
    with any text; separators and known noise never (``"a | b"``; empty when there is nothing)."""
    lines = [line.strip() for line in text.splitlines() if not _NOISE.search(line)]
    chosen = [line for line in lines if _TELLING.search(line)][:limit] or lines[-limit:]
    return " | ".join(line[:width] for line in chosen)
