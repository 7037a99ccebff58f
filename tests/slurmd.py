"""Real Slurm compute nodes for tests: munged + slurmctld + one ``slurmd -N <node>`` per node, on loopback.

    with SlurmdCluster.start(tmp_path, names=("node01", "node02"), cpus=8) as cluster:
        subprocess.run(["srun", "-N2", "hostname"], env={**os.environ, **cluster.env})

Builds on ``tests/slurmctld.py`` (own munge key/socket, own slurm.conf, free loopback ports). Every
node is ``NodeAddr=127.0.0.1`` with its own ``Port=`` and its own spool/pid/log (``%n``), so several
slurmd run on this one machine (Debian's slurmd accepts ``-N``). ``cpus`` per node is what slurm.conf
claims, accepted on smaller hardware through ``SlurmdParameters=config_overrides``. No cgroups:
``proctrack/linuxproc``, ``task/none``. ``stop()`` cancels this cluster's jobs, then signals exactly
the PIDs started here (slurmd, slurmctld, munged) with bounded waits. Needs root (slurmd launches
tasks as the submitting user).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.slurmctld import _CONF, START_TIMEOUT_S, SlurmCluster, _wait_for, free_ports
from tests.slurmctld import missing_tools as ctld_missing_tools

TOOLS = ("slurmd", "srun", "scancel")


def missing_tools() -> list[str]:
    """Tools absent for a slurmd cluster (and 'root' when not running as root)."""
    missing = ctld_missing_tools() + [t for t in TOOLS if shutil.which(t) is None]
    return missing + ([] if os.geteuid() == 0 else ["root"])


@dataclass
class SlurmdCluster(SlurmCluster):
    names: tuple[str, ...] = ("node01",)
    cpus: int = 1

    @classmethod
    def start(cls, base: Path, names: tuple[str, ...] = ("node01",),  # type: ignore[override]
              cpus: int = 1) -> SlurmdCluster:
        cluster = cls(base=base, nodes=",".join(names), names=tuple(names), cpus=cpus)
        try:
            cluster._start()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _conf_text(self, munge_socket: Path) -> str:
        base = self.base
        ctld_port, slurmd_port, *node_ports = free_ports(2 + len(self.names))
        text = _CONF.format(ctld_port=ctld_port, slurmd_port=slurmd_port, munge_socket=munge_socket,
                            state=base / "state", spool=base / "spool-%n", base=base, nodes=self.nodes)
        head, _ = text.split("NodeName=", 1)
        head = head.replace("SlurmdTimeout=0\n", "SlurmdTimeout=300\n")
        host = socket.gethostname()
        lines = [f"NodeName={n} NodeAddr=127.0.0.1 NodeHostname={host} Port={port} CPUs={self.cpus}"
                 " State=UNKNOWN" for n, port in zip(self.names, node_ports, strict=True)]
        return head + "".join([
            "SlurmdParameters=config_overrides\n",
            f"SlurmdPidFile={base}/slurmd-%n.pid\n",
            f"SlurmdLogFile={base}/log/slurmd-%n.log\n",
            "SlurmdDebug=info\n",
            *(line + "\n" for line in lines),
            "PartitionName=gpu Nodes=ALL Default=YES State=UP\n",
        ])

    def _nodes_up(self) -> None:
        conf = self.env["SLURM_CONF"]
        for name in self.names:
            (self.base / f"spool-{name}").mkdir(exist_ok=True)
            log = self.base / "log" / f"slurmd-{name}.out"
            self._spawn(["slurmd", "-D", "-f", conf, "-N", name], log)
        deadline = time.monotonic() + START_TIMEOUT_S
        for proc, name in zip(self.procs[-len(self.names):], self.names, strict=True):
            log = self.base / "log" / f"slurmd-{name}.out"
            _wait_for(lambda name=name: self.node_state(name) == "idle", f"slurmd {name} idle", proc, log)
            if time.monotonic() > deadline:
                raise RuntimeError(f"slurmd nodes not idle after {START_TIMEOUT_S:.0f}s")

    def node_state(self, name: str) -> str:
        """sinfo's compact state of one node (``idle``, ``alloc``, ``idle*`` when not responding)."""
        return self.tool("sinfo", "-h", "-N", "-n", name, "-o", "%t", check=False).stdout.strip()

    def stop(self) -> None:
        if self.env and any(p.poll() is None for p in self.procs):
            # only this cluster's jobs (scancel talks to our slurmctld through SLURM_CONF); best effort
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                self.tool("scancel", f"--user={os.geteuid()}", check=False)
        super().stop()
