"""Slurm, one job step for the whole sweep: ``srun --nodelist=<nodeset> --nodes=N --ntasks-per-node=1``.

    transport = SlurmStepTransport(hosts, commands_for, spool=run_dir / "slurm-step")
    transport.collect(host, commands, deadline_s=300)   # the first call submits the step for every host

Before submission one ``sinfo`` lists every node: nodes Slurm does not know, and drained, down or
not-responding ones, are left out and reported ERROR with their state and reason; nodes running a
job are left out as busy (SKIP). The others get ONE ``srun`` (one per distinct command plan, i.e.
per hardware profile). Each task writes its framed stream to ``<spool>/<SLURMD_NODENAME>.stream``
and its exit code to ``.end`` on a directory shared with the orchestrator: no interleaving, binary
output byte-exact, and each host is read with the same ``FrameReader`` as ssh. The step has a deadline
(from submission): a node that has not finished by then is ERROR naming it, the others are kept. The
step's job id, node list and srun messages go to ``<spool>/steps.json``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ClusterShell.NodeSet import NodeSet

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import CommandResult, Host, HostCollection
from healthcheck.core.spec import ParseError
from healthcheck.transport.process import stop_group
from healthcheck.transport.registry import TransportError, TransportSettings, register
from healthcheck.transport.script import Command, build_script, new_marker
from healthcheck.transport.slurm import BUSY_STATES, SlurmTransport, describe_srun_failure, slurm_node
from healthcheck.transport.slurm_nodes import SlurmNode, parse_sinfo_state_reason
from healthcheck.transport.stream import host_failure, read_framed, stuck

# Runs on every node: $1 spool, $2 the framed script. SLURMD_NODENAME comes from slurmd, not the node's output.
TASK_WRAPPER = r"""n=${SLURMD_NODENAME:-}
case $n in ''|.*|*/*) echo "healthcheck: unusable SLURMD_NODENAME '$n'" >&2; exit 3;; esac
f=$1/$n
printf '%s\n' "${SLURM_JOB_ID:-}" >"$f.job"
sh -c "$2" >"$f.stream" 2>"$f.err"
rc=$?; [ -e "$f.stream" ] && echo $rc >"$f.end"
"""
POLL_S = (0.05, 1.0)  # idle poll interval of a node's stream: starts short, doubles up to the maximum
RUNNING_OK = ("idle",)


@dataclass
class _Step:
    """One srun over a group of nodes sharing a command plan."""

    nodes: list[str]
    started: float = 0.0
    proc: subprocess.Popen[bytes] | None = None
    stderr: IO[bytes] | None = None
    argv: list[str] = field(default_factory=list)
    pending: set[str] = field(default_factory=set)
    launch_error: str | None = None
    marker: str = ""


class SlurmStepTransport:
    name = "slurm"

    def __init__(self, hosts: Sequence[Host], commands_for: Callable[[Host], Sequence[Command]], spool: Path,
                 srun_args: Sequence[str] = (), alloc_wait_s: float = DEFAULTS.connect_timeout_s,
                 cap: int = DEFAULTS.output_cap_bytes, kill_after_s: float = DEFAULTS.kill_after_s,
                 srun: str = "srun", job_name: str = "healthcheck") -> None:
        self.hosts = list(hosts)
        self.commands_for = commands_for
        self.spool = Path(spool)
        # the srun settings live once, in the per-host transport (used for the nodes the step cannot take)
        self.per_host = SlurmTransport(srun_args, alloc_wait_s, cap, kill_after_s, srun, job_name)
        settings = self.per_host
        self.srun_args, self.alloc_wait_s, self.cap = settings.srun_args, settings.alloc_wait_s, settings.cap
        self.kill_after_s, self.srun, self.job_name = settings.kill_after_s, settings.srun, settings.job_name
        self._lock = threading.Lock()
        self._left_out: dict[str, HostCollection] | None = None
        self._steps: dict[tuple[Command, ...], _Step] = {}
        self.records: list[dict[str, object]] = []

    # -- submission ------------------------------------------------------------------------------
    def _split(self) -> dict[str, HostCollection]:
        """One sinfo for the whole cluster; host name -> failure for every node left out."""
        sinfo = os.path.join(os.path.dirname(shutil.which(self.srun) or ""), "sinfo")
        argv = [sinfo if os.path.exists(sinfo) else "sinfo", "-h", "-N", "-o", "%N|%T|%E"]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            states = parse_sinfo_state_reason(out.stdout).nodes if out.returncode == 0 else None
            why = f"rc={out.returncode}: {out.stderr.strip()[-300:]}"
        except (OSError, subprocess.SubprocessError, ParseError) as exc:
            states, why = None, str(exc)
        left: dict[str, HostCollection] = {}
        for host in self.hosts:
            node, commands = slurm_node(host), self.commands_for(host)
            if states is None:
                left[host.name] = host_failure(host.name, commands, f"cannot list Slurm nodes (sinfo {why}); "
                                               "nothing submitted")
            elif (reason := _unusable(node, states.get(node))) is not None:
                failure = host_failure(host.name, commands, reason)
                busy = states.get(node) is not None and _base(states[node].state) in BUSY_STATES
                left[host.name] = dataclasses.replace(failure, busy=True) if busy else failure
        return left

    def _launch(self, key: tuple[Command, ...], deadline_s: float) -> _Step:
        if self._left_out is None:
            self._left_out = self._split()
        commands_of = {h.name: tuple(self.commands_for(h)) for h in self.hosts if h.name not in self._left_out}
        nodes = sorted({slurm_node(h) for h in self.hosts if commands_of.get(h.name) == key})
        step = _Step(nodes=nodes, pending=set(nodes), started=time.monotonic())
        self._steps[key] = step
        if not nodes:
            return step
        if shutil.which(self.srun) is None:
            step.launch_error = f"srun ({self.srun}) not found on the orchestrator's PATH"
            return step
        self.spool.mkdir(parents=True, exist_ok=True)
        step.marker = new_marker()
        script = build_script(list(key), step.marker, self.cap, self.kill_after_s)
        step.argv = self.argv(nodes, deadline_s)
        step.stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in _finish)
        try:
            step.proc = subprocess.Popen([*step.argv, "sh", "-c", TASK_WRAPPER, "hc-step", str(self.spool), script],
                                         stdin=subprocess.DEVNULL, stdout=step.stderr, stderr=step.stderr,
                                         start_new_session=True)
        except OSError as exc:
            step.launch_error = f"cannot start srun: {exc}"
        return step

    def argv(self, nodes: Sequence[str], deadline_s: float) -> list[str]:
        """srun options for one step over ``nodes`` (the wrapper and script follow them)."""
        n = len(nodes)
        return [self.srun, f"--nodelist={NodeSet.fromlist(nodes)}", f"--nodes={n}", f"--ntasks={n}",
                "--ntasks-per-node=1", f"--job-name={self.job_name}", f"--time={max(1, math.ceil(deadline_s / 60))}",
                f"--immediate={max(1, math.ceil(self.alloc_wait_s))}", "--no-kill", "--kill-on-bad-exit=0",
                "--quiet", *self.srun_args]

    # -- collection ------------------------------------------------------------------------------
    def collect(self, host: Host, commands: Sequence[Command], deadline_s: float) -> HostCollection:
        key = tuple(commands)
        with self._lock:
            step = self._steps.get(key) or self._launch(key, deadline_s)
            assert self._left_out is not None
            left = self._left_out.get(host.name)
        if left is not None:
            return left
        node = slurm_node(host)
        try:
            return self._read(host.name, node, commands, step, deadline_s)
        finally:
            self._done(step, node)

    def _read(self, name: str, node: str, commands: Sequence[Command], step: _Step,
              deadline_s: float) -> HostCollection:
        if step.launch_error is not None:
            return host_failure(name, commands, step.launch_error)
        base = self.spool / node
        source = _SpoolFile(base, step)
        # a node that already finished is read in full even when its turn comes after the deadline
        started = time.monotonic() if Path(f"{base}.end").exists() else step.started
        try:
            collection = read_framed(name, commands, step.marker, source.read_chunk, deadline_s,
                                     byte_limit=2 * self.cap * max(1, len(commands)) + (1 << 20),
                                     stderr_tail=source.err_tail, started=started,
                                     startup_s=self.alloc_wait_s, kill_after_s=self.kill_after_s)
        finally:
            source.close()
        if collection.transport_error is not None and not source.seen:
            return host_failure(name, commands, self._nothing_from(node, step, collection, deadline_s),
                                collection.duration_s)
        return collection

    def _nothing_from(self, node: str, step: _Step, collection: HostCollection, deadline_s: float) -> str:
        """Why no output file ever appeared for ``node``."""
        unshared = (f"no {self.spool / node}.stream here: is the spool directory on a filesystem shared with "
                    "the nodes? (--slurm-spool)")
        if stuck(collection.transport_error):  # the step deadline, or the silence limit of the first command
            return f"{node} sent nothing ({collection.transport_error}); {unshared}"
        rc = step.proc.returncode if step.proc else None
        if rc == 0:
            return f"the job step ran on {node} and ended, but {unshared}"
        with self._lock:
            said = _tail(step.stderr).decode("utf-8", errors="replace")
        return describe_srun_failure(said, rc, node, None)

    def _done(self, step: _Step, node: str) -> None:
        with self._lock:
            step.pending.discard(node)
            finished = not step.pending
        for suffix in (".stream", ".end", ".err"):  # .job stays until the step's record is written
            (self.spool / f"{node}{suffix}").unlink(missing_ok=True)
        if finished:
            self._finish(step)

    def _finish(self, step: _Step) -> None:
        """Stop the step (it ends by itself once every task has) and record it in steps.json."""
        if step.proc is not None:
            stop_group(step.proc, self.kill_after_s, linger_s=self.kill_after_s)
        jobs = sorted({(self.spool / f"{n}.job").read_text().strip() for n in step.nodes
                       if (self.spool / f"{n}.job").is_file()})
        for n in step.nodes:  # a task killed at the deadline may have written after its host was read
            for suffix in (".stream", ".end", ".err", ".job"):
                (self.spool / f"{n}{suffix}").unlink(missing_ok=True)
        record = {"job_ids": jobs, "nodes": str(NodeSet.fromlist(step.nodes)), "node_count": len(step.nodes),
                  "argv": step.argv, "rc": step.proc.returncode if step.proc else None,
                  "srun_stderr": _tail(step.stderr).decode("utf-8", errors="replace") if step.stderr else "",
                  "launch_error": step.launch_error}
        with self._lock:
            self.records.append(record)
            if self.spool.is_dir():
                tmp = self.spool / "steps.json.tmp"
                tmp.write_text(json.dumps(self.records, indent=1) + "\n")
                tmp.replace(self.spool / "steps.json")
        if step.stderr:
            step.stderr.close()

    def close(self) -> None:
        """Stop any step still running (interrupted sweep)."""
        for step in list(self._steps.values()):
            if step.proc is not None and step.proc.poll() is None:
                stop_group(step.proc, self.kill_after_s)

    def run(self, host: Host, command: str, timeout_s: float, command_id: str = "adhoc") -> CommandResult:
        return self.per_host.run(host, command, timeout_s, command_id)


class _SpoolFile:
    """``read_chunk`` over ``<spool>/<node>.stream`` while the task writes it; EOF once ``.end`` exists
    (or the step has ended) and everything was read."""

    def __init__(self, base: Path, step: _Step) -> None:
        self.base = base
        self.step = step
        self.handle: IO[bytes] | None = None
        self.seen = False
        self.idle_s = POLL_S[0]

    def read_chunk(self, wait_s: float) -> bytes | None:
        if self.handle is None:
            try:
                self.handle = open(f"{self.base}.stream", "rb")  # noqa: SIM115 (closed in close())
                self.seen = True
            except FileNotFoundError:
                pass
        ended = Path(f"{self.base}.end").exists() or (self.step.proc is not None and self.step.proc.poll() is not None)
        if self.handle is not None:
            data = self.handle.read(65536)
            if data:
                self.idle_s = POLL_S[0]
                return data
        if ended:
            return b""
        # a thousand hosts polling every 50 ms would cost the orchestrator a core: back off while idle
        time.sleep(min(wait_s, self.idle_s))
        self.idle_s = min(POLL_S[1], self.idle_s * 2)
        return None

    def err_tail(self) -> bytes:
        try:
            with open(f"{self.base}.err", "rb") as err:
                return err.read()[-4096:]
        except OSError:
            return b""

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def _base(state: str) -> str:
    return state.lower().rstrip("*~#!%$@^-").split("+")[0]


def _unusable(node: str, state: SlurmNode | None) -> str | None:
    """Why ``node`` is left out of the step (None when it can run it)."""
    if state is None:
        return f"Slurm does not know node {node} (set the host var slurm_node?)"
    text = f"node state {state.state}" + (f" (reason: {state.reason})" if state.reason else "")
    head = f"Slurm node {node} left out of the sweep's job step"
    base = _base(state.state)
    if base in BUSY_STATES:
        return f"{head}: running a job ({text})"
    if state.state.endswith("*"):
        return f"{head}: not responding ({text})"
    if base not in RUNNING_OK:
        return f"{head}: {text}"
    return None


def _tail(err: IO[bytes] | None, limit: int = 4096) -> bytes:
    if err is None or err.closed:
        return b""
    err.flush()
    size = err.seek(0, os.SEEK_END)
    err.seek(max(0, size - limit))
    return err.read()


@register("slurm-step")
def open_slurm_step(settings: TransportSettings) -> SlurmStepTransport:
    """One job step for ``settings.hosts``, writing under ``settings.spool`` (shared with the nodes)."""
    if settings.spool is None:
        raise TransportError("the slurm-step transport needs a spool folder shared with the nodes")
    return SlurmStepTransport(settings.hosts, settings.commands_for or (lambda host: ()), settings.spool,
                              srun_args=settings.srun_args, alloc_wait_s=settings.connect_timeout_s,
                              cap=settings.cap)
