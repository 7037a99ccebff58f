"""The transport registry: each way of reaching a host is one module, registered under a name.

    transport = open_transport("ssh", TransportSettings(ssh_config=Path("ssh_config")))
    transport.run(host, "hostname", timeout_s=10)
    registry_name("slurm", slurm_mode="per-host")            # "slurm-per-host"

Built-ins: ``local``, ``ssh`` (paramiko), ``openssh`` (the system ssh), ``slurm-per-host`` (one srun per
host), ``slurm-step`` (one job step for all hosts) and ``replay`` (a bundle's outputs). Each module calls
``register`` at import; ``BUILTIN`` names the module of each, imported on first use (the paramiko client
alone costs a replay more than its grading). A new transport is one module plus one line in ``BUILTIN``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Host
from healthcheck.core.spec import Transport
from healthcheck.core.suggest import did_you_mean

BUILTIN = {
    "local": "healthcheck.transport.local",
    "ssh": "healthcheck.transport.ssh",
    "openssh": "healthcheck.transport.openssh",
    "slurm-per-host": "healthcheck.transport.slurm",
    "slurm-step": "healthcheck.transport.slurm_step",
    "replay": "healthcheck.transport.replay",
}
SSH_CLIENTS = ("paramiko", "openssh")
SLURM_MODES = ("step", "per-host")


class TransportError(ValueError):
    """An unknown transport name, or a transport registered twice."""


@dataclass(frozen=True)
class TransportSettings:
    """What a transport is opened with; each one reads the fields it needs."""

    ssh_config: Path | None = None
    accept_new_host_keys: bool = False
    connect_timeout_s: float = DEFAULTS.connect_timeout_s  # ssh: connect and authenticate; srun: the allocation
    cap: int = DEFAULTS.output_cap_bytes                   # bytes kept of each command's stdout and stderr
    srun_args: Sequence[str] = ()
    spool: Path | None = None                              # slurm-step: a folder shared with the nodes
    bundle: Path | None = None                             # replay: the run directory or capture bundle
    hosts: Sequence[Host] = ()                             # slurm-step: the hosts of its one job step
    commands_for: Callable[[Host], Sequence[Any]] | None = None  # slurm-step: each host's command plan


Factory = Callable[[TransportSettings], Transport]
_FACTORIES: dict[str, Factory] = {}


def register(name: str) -> Callable[[Factory], Factory]:
    """Decorator: ``@register("ssh") def open_ssh(settings) -> Transport``; a duplicate name raises."""
    def add(factory: Factory) -> Factory:
        if name in _FACTORIES:
            raise TransportError(f"transport {name!r} registered twice")
        _FACTORIES[name] = factory
        return factory
    return add


def transport_names() -> list[str]:
    return sorted({*BUILTIN, *_FACTORIES})


def open_transport(name: str, settings: TransportSettings | None = None) -> Transport:
    """The transport registered as ``name``, opened with ``settings`` (defaults when None)."""
    if name not in _FACTORIES and name in BUILTIN:
        importlib.import_module(BUILTIN[name])
    factory = _FACTORIES.get(name)
    if factory is None:
        raise TransportError(f"unknown transport {name!r}{did_you_mean(name, transport_names())}; "
                             f"known: {', '.join(transport_names())}")
    return factory(settings or TransportSettings())


def registry_name(kind: str, ssh_client: str = "paramiko", slurm_mode: str = "step") -> str:
    """The registered transport for a host's ``transport`` var (``ssh``, ``local``, ``slurm``) under the
    run's ``--ssh-client`` and ``--slurm-mode``; a registered name is taken as it is."""
    if kind == "ssh":
        if ssh_client not in SSH_CLIENTS:
            raise TransportError(f"unknown ssh client {ssh_client!r} ({', '.join(SSH_CLIENTS)})")
        return "openssh" if ssh_client == "openssh" else "ssh"
    if kind == "slurm":
        if slurm_mode not in SLURM_MODES:
            raise TransportError(f"unknown slurm mode {slurm_mode!r} ({', '.join(SLURM_MODES)})")
        return f"slurm-{slurm_mode}"
    return kind
