"""A real Slurm controller for tests: munged + slurmctld on loopback, nothing shared with the system.

    with SlurmCluster.start(tmp_path, nodes="gpu[001-010]") as cluster:
        cluster.env                      # {"SLURM_CONF": ".../slurm.conf"}: pass to scontrol/sinfo
        cluster.scontrol("show", "node", "gpu001")

Everything lives under the given directory: its own munge key and socket, its own slurm.conf
(``SlurmctldHost=localhost(127.0.0.1)``, a free loopback port, ``AuthInfo=socket=`` pointing at
our munged, ``StateSaveLocation`` under the directory). No slurmd runs: nodes are defined in
slurm.conf and brought to IDLE with ``State=DOWN`` then ``State=RESUME`` (a node still in the
UNKNOWN base state rejects RESUME with "Invalid node state specified"), so they show as
``idle*`` (not responding), which is enough for ``State=DRAIN``/``RESUME`` and reasons. Only the
two PIDs started here are ever signalled, and every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = ("munged", "mungekey", "slurmctld", "scontrol", "sinfo")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0

_CONF = """\
ClusterName=hctest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
SlurmUser=root
StateSaveLocation={state}
SlurmdSpoolDir={spool}
SlurmctldPidFile={base}/slurmctld.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmctldDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=0
SlurmdTimeout=0
NodeName={nodes} NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES State=UP
"""


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports: every socket stays bound until all are chosen (ports chosen
    one after another can repeat, and two daemons of one cluster then fight over one port)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


@dataclass
class SlurmCluster:
    base: Path
    nodes: str
    env: dict[str, str] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @classmethod
    def start(cls, base: Path, nodes: str = "gpu[001-010]") -> SlurmCluster:
        cluster = cls(base=base, nodes=nodes)
        try:
            cluster._start()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def __enter__(self) -> SlurmCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self) -> None:
        base = self.base
        for sub in ("munge", "munge-run", "state", "spool", "log"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        (base / "munge").chmod(0o700)
        (base / "munge-run").chmod(0o755)
        key = base / "munge" / "munge.key"
        subprocess.run(["mungekey", "-c", "-f", "-k", str(key)], check=True, timeout=30,
                       capture_output=True)
        key.chmod(0o600)
        sock = base / "munge-run" / "munge.sock"
        self._spawn(["munged", "-F", "-f", f"--socket={sock}", f"--key-file={key}",
                     f"--log-file={base / 'log' / 'munged.log'}",
                     f"--pid-file={base / 'munge' / 'munged.pid'}",
                     f"--seed-file={base / 'munge' / 'seed'}"], base / "log" / "munged.out")
        _wait_for(lambda: sock.exists(), "munged socket", self.procs[-1], base / "log" / "munged.out")
        conf = base / "slurm.conf"
        conf.write_text(self._conf_text(sock))
        self.env = {"SLURM_CONF": str(conf)}
        self._spawn(["slurmctld", "-D", "-c", "-f", str(conf)], base / "log" / "slurmctld.out")
        _wait_for(lambda: "UP" in self.scontrol("ping", check=False).stdout, "slurmctld ping",
                  self.procs[-1], base / "log" / "slurmctld.out")
        self._nodes_up()

    def _conf_text(self, munge_socket: Path) -> str:
        """slurm.conf for this cluster (``tests/slurmd.py`` overrides it to add real slurmd nodes)."""
        base = self.base
        ctld_port, slurmd_port = free_ports(2)
        return _CONF.format(ctld_port=ctld_port, slurmd_port=slurmd_port, munge_socket=munge_socket,
                            state=base / "state", spool=base / "spool", base=base, nodes=self.nodes)

    def _nodes_up(self) -> None:
        # No slurmd: bring the nodes out of the UNKNOWN base state so RESUME is accepted later.
        self.scontrol("update", f"NodeName={self.nodes}", "State=DOWN", "Reason=test setup")
        self.scontrol("update", f"NodeName={self.nodes}", "State=RESUME")

    def _spawn(self, argv: list[str], log: Path) -> None:
        with log.open("wb") as out:
            self.procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                               stderr=subprocess.STDOUT, env={**os.environ, **self.env}))

    def scontrol(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.tool("scontrol", *args, check=check)

    def tool(self, name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([name, *args], capture_output=True, text=True, timeout=30, check=check,
                              env={**os.environ, **self.env})

    def stop(self) -> None:
        """SIGTERM exactly the daemons started here (slurmctld first), SIGKILL after a bounded wait."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=STOP_TIMEOUT_S)
        self.procs.clear()


def _wait_for(ready, what: str, proc: subprocess.Popen[bytes], log: Path) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what}: daemon exited rc={proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if ready():
                return
        except (OSError, subprocess.SubprocessError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} not ready after {START_TIMEOUT_S:.0f}s: {log.read_text()[-2000:]}")
