"""Slurm transport: the same framed script, run on the node by ``srun`` (for sites with no SSH to nodes).

    transport = SlurmTransport(srun_args=("--partition=gpu",), alloc_wait_s=10)
    collection = transport.collect(host, commands, deadline_s=300)

One ``srun --nodelist=<node> --nodes=1 --ntasks=1 --immediate=<s> --time=<min> sh -c <script>`` per
host, argv only (no shell here). The node is the host var ``slurm_node``, else the host name. Slurm is
reached through this process's environment (``SLURM_CONF`` and friends). ``--immediate`` makes a
drained, down or busy node a prompt error instead of a job pending forever; on any failure before
the first section arrives the node's state and reason (``sinfo``) are added to the message.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import CommandResult, Host, HostCollection
from healthcheck.transport.process import pipe_reader, stop_group
from healthcheck.transport.registry import TransportSettings, register
from healthcheck.transport.script import Command, build_script, new_marker
from healthcheck.transport.slurm_nodes import slurm_unusable
from healthcheck.transport.stream import host_failure, read_framed, stuck

_SRUN_ERROR = re.compile(r"^srun: error: (.+)$", re.MULTILINE)


class SlurmTransport:
    name = "slurm"

    def __init__(self, srun_args: Sequence[str] = (), alloc_wait_s: float = DEFAULTS.connect_timeout_s,
                 cap: int = DEFAULTS.output_cap_bytes, kill_after_s: float = DEFAULTS.kill_after_s,
                 srun: str = "srun", job_name: str = "healthcheck") -> None:
        self.srun_args = tuple(srun_args)
        self.alloc_wait_s = alloc_wait_s
        self.cap = cap
        self.kill_after_s = kill_after_s
        self.srun = srun
        self.job_name = job_name

    def argv(self, host: Host, script: str, deadline_s: float) -> list[str]:
        """The srun command line for one host (the script is one argv element, never re-parsed here)."""
        return [self.srun, f"--nodelist={slurm_node(host)}", "--nodes=1", "--ntasks=1",
                f"--job-name={self.job_name}", f"--time={max(1, math.ceil(deadline_s / 60))}",
                f"--immediate={max(1, math.ceil(self.alloc_wait_s))}", "--quiet", *self.srun_args,
                "sh", "-c", script]

    def collect(self, host: Host, commands: Sequence[Command], deadline_s: float) -> HostCollection:
        started = time.monotonic()
        node = slurm_node(host)
        if shutil.which(self.srun) is None:
            return host_failure(host.name, commands, f"srun ({self.srun}) not found on the orchestrator's PATH; "
                                "install the Slurm client or use another transport")
        script = build_script(commands, marker := new_marker(), self.cap, self.kill_after_s)
        with tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(self.argv(host, script, deadline_s), stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=err, start_new_session=True)
            except OSError as exc:
                return host_failure(host.name, commands, f"cannot start srun: {exc}")
            collection: HostCollection | None = None
            try:
                collection = read_framed(host.name, commands, marker, pipe_reader(proc), deadline_s,
                                         byte_limit=2 * self.cap * max(1, len(commands)) + (1 << 20),
                                         stderr_tail=lambda: _tail(err), started=started,
                                         startup_s=self.alloc_wait_s, kill_after_s=self.kill_after_s)
            finally:  # srun ends by itself once the script has; not when the deadline passed
                ended = collection is not None and not stuck(collection.transport_error)
                stop_group(proc, self.kill_after_s, linger_s=self.kill_after_s if ended else 0.0)
            if collection.transport_error is None or any(r.transport_error is None
                                                         for r in collection.results.values()):
                return collection  # complete, or partly collected: read_framed's message stands
            if stuck(collection.transport_error):
                return collection
            state = self._node_state(node)
            reason = describe_srun_failure(_tail(err).decode("utf-8", errors="replace"), proc.returncode,
                                           node, state)
            failure = host_failure(host.name, commands, reason, time.monotonic() - started)
            if state and state.split()[0].rstrip("*~#") in BUSY_STATES:
                return dataclasses.replace(failure, busy=True)  # in use, not broken
            return failure

    def run(self, host: Host, command: str, timeout_s: float, command_id: str = "adhoc") -> CommandResult:
        collection = self.collect(host, [Command(command_id, command, timeout_s)],
                                  deadline_s=timeout_s + self.kill_after_s + self.alloc_wait_s + 10)
        return collection.results[command_id]

    def _node_state(self, node: str) -> str | None:
        """``drained (Reason=test)``-style state of the node from sinfo, or None when it cannot say."""
        sinfo = os.path.join(os.path.dirname(shutil.which(self.srun) or ""), "sinfo")
        try:
            out = subprocess.run([sinfo if os.path.exists(sinfo) else "sinfo", "-h", "-N", "-n", node,
                                  "-o", "%T|%E"], capture_output=True, text=True, timeout=10,
                                 stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            return None
        line = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
        if not line:
            return None
        state, _, reason = line.partition("|")
        return state + (f" (reason: {reason})" if reason and reason != "none" else "")


BUSY_STATES = ("allocated", "mixed", "completing")


def slurm_client_problem(srun: str = "srun", timeout_s: float = 60.0) -> str | None:
    """Why the Slurm transport cannot work from this machine (srun missing, no configuration, the
    controller silent), from one ``sinfo``; None when Slurm answers. Asked once, before a run starts."""
    if shutil.which(srun) is None:
        return f"srun ({srun}) not found on PATH: install the Slurm client or use another transport"
    sinfo = os.path.join(os.path.dirname(shutil.which(srun) or ""), "sinfo")
    try:
        out = subprocess.run([sinfo if os.path.exists(sinfo) else "sinfo", "-h", "-o", "%P"], capture_output=True,
                             text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"sinfo did not answer within {timeout_s:g} s (the Slurm controller is unreachable?)"
    except OSError as exc:
        return f"sinfo cannot run: {exc}"
    return slurm_unusable(out.stderr) if out.returncode != 0 else None


def slurm_node(host: Host) -> str:
    """The Slurm node name of a host: its ``slurm_node`` var, else its inventory name."""
    return str(host.vars.get("slurm_node") or host.name)


def describe_srun_failure(stderr: str, rc: int | None, node: str, state: str | None) -> str:
    """One line an operator can act on: what srun said, and the node's state and reason when known."""
    errors = [e.strip() for e in _SRUN_ERROR.findall(stderr)]
    said = "; ".join(dict.fromkeys(errors)) or (stderr.strip().splitlines() or [""])[-1][:300]
    lowered = said.lower()
    if "invalid node name" in lowered:
        what = f"Slurm does not know node {node} (set the host var slurm_node?)"
    elif "immediate execution impossible" in lowered or "unable to allocate" in lowered:
        what = f"Slurm refused an allocation on {node}"
    elif "job violates accounting" in lowered or "invalid account" in lowered or "partition" in lowered:
        what = f"Slurm refused the job for {node} (partition/account/QOS)"
    else:
        what = f"srun on {node} failed (rc {rc})"
    return what + (f": node state {state}" if state else "") + (f"; srun: {said}" if said else "")


def _tail(err, limit: int = 4096) -> bytes:  # type: ignore[no-untyped-def]
    err.flush()
    size = err.seek(0, os.SEEK_END)
    err.seek(max(0, size - limit))
    return err.read()


@register("slurm-per-host")
def open_slurm_per_host(settings: TransportSettings) -> SlurmTransport:
    """One ``srun`` per host; the allocation waits at most ``connect_timeout_s``."""
    return SlurmTransport(srun_args=settings.srun_args, alloc_wait_s=settings.connect_timeout_s, cap=settings.cap)
