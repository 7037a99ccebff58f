"""The transports of one run, opened from the registry: one per kind of host, or the bundle for a replay.

    check_reach(opts, plan.hosts)          # raises TransportError when a transport cannot work from here
    transport = open_sweep_transport(opts, plan.hosts, run_dir, plan.commands_for)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from healthcheck.core.model import Host
from healthcheck.core.spec import Transport
from healthcheck.run.options import RunOptions
from healthcheck.transport import PerHostTransport, TransportSettings, open_transport, registry_name
from healthcheck.transport.registry import TransportError
from healthcheck.transport.script import Command
from healthcheck.transport.slurm import slurm_client_problem


def check_reach(opts: RunOptions, hosts: Sequence[Host]) -> None:
    """Before anything runs: a Slurm transport that cannot work from this machine (no srun, no Slurm
    configuration, a silent controller) is a setup error in one line, not an ERROR per host."""
    if opts.target.replay is None and any(h.transport == "slurm" for h in hosts):
        problem = slurm_client_problem()
        if problem is not None:
            raise TransportError(f"--transport slurm: {problem}")


def open_sweep_transport(opts: RunOptions, hosts: Sequence[Host], run_dir: Path,
                         commands_for: Callable[[Host], Sequence[Command]]) -> Transport:
    """The replay transport for a replay; otherwise each kind of host's registered transport (ssh unless
    the host says local or slurm; ``--ssh-client`` and ``--slurm-mode`` pick among the registered ones)."""
    if opts.target.replay is not None:
        return open_transport("replay", TransportSettings(bundle=opts.target.replay))
    reach = opts.transport
    base = TransportSettings(ssh_config=reach.ssh_config, accept_new_host_keys=reach.accept_new_host_keys,
                             connect_timeout_s=reach.connect_timeout_s, cap=reach.output_cap_bytes,
                             srun_args=tuple(reach.srun_args), spool=Path(reach.slurm_spool or run_dir / "slurm-step"),
                             commands_for=commands_for)
    by_kind = {}
    for kind in sorted({h.transport for h in hosts}):
        settings = replace(base, hosts=[h for h in hosts if h.transport == kind])
        by_kind[kind] = open_transport(registry_name(kind, reach.ssh_client, reach.slurm_mode), settings)
    return PerHostTransport(by_kind)
