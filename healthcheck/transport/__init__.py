"""Transports: how a command reaches a host. All return the same ``HostCollection``/``CommandResult``.

    transport = open_transport("ssh", ssh_config_path=Path("ssh_config"))
    transport.run(host, "hostname", timeout_s=10)

The paramiko client (``transport.ssh``, with paramiko, cryptography and invoke: slow to import) is imported only
when an ssh transport is opened or ``SshTransport`` is named, so replays and reports never load it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import CommandResult, Host, HostCollection
from healthcheck.core.spec import Transport
from healthcheck.transport.local import LocalTransport
from healthcheck.transport.openssh import OpensshTransport
from healthcheck.transport.replay import ReplayTransport
from healthcheck.transport.script import Command
from healthcheck.transport.slurm import SlurmTransport
from healthcheck.transport.sshconfig import load_ssh_config

__all__ = ["SSH_CLIENTS", "Command", "LocalTransport", "OpensshTransport", "PerHostTransport", "ReplayTransport",
           "SlurmTransport", "SshTransport", "open_transport"]

SSH_CLIENTS = ("paramiko", "openssh")


def __getattr__(name: str) -> Any:
    """``SshTransport`` on first use (PEP 562), keeping paramiko out of every run that does not ssh."""
    if name == "SshTransport":
        from healthcheck.transport.ssh import SshTransport
        return SshTransport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_transport(kind: str, *, ssh_config_path: Path | None = None, accept_new_host_keys: bool = False,
                   connect_timeout_s: float = DEFAULTS.connect_timeout_s,
                   cap: int = DEFAULTS.output_cap_bytes, bundle: Path | None = None,
                   srun_args: Sequence[str] = (), ssh_client: str = "paramiko") -> Transport:
    """A transport by name: ``ssh``, ``local``, ``slurm`` (``srun`` per host, ``connect_timeout_s`` is
    how long to wait for the allocation, ``srun_args`` e.g. ``--partition=gpu``) or ``replay`` (needs
    ``bundle``). ``ssh_client`` picks paramiko (default) or the system OpenSSH ``ssh`` (docs/ssh.md)."""
    if kind == "ssh" and ssh_client == "openssh":
        return OpensshTransport(ssh_config_path, accept_new_host_keys=accept_new_host_keys,
                                connect_timeout_s=connect_timeout_s, cap=cap)
    if kind == "ssh" and ssh_client != "paramiko":
        raise ValueError(f"unknown ssh client {ssh_client!r} ({', '.join(SSH_CLIENTS)})")
    if kind == "ssh":
        from healthcheck.transport.ssh import SshTransport
        return SshTransport(load_ssh_config(ssh_config_path), accept_new_host_keys=accept_new_host_keys,
                            connect_timeout_s=connect_timeout_s, cap=cap)
    if kind == "local":
        return LocalTransport(cap=cap)
    if kind == "slurm":
        return SlurmTransport(srun_args=srun_args, alloc_wait_s=connect_timeout_s, cap=cap)
    if kind == "replay":
        if bundle is None:
            raise ValueError("the replay transport needs a bundle directory")
        return ReplayTransport(bundle)
    raise ValueError(f"unknown transport {kind!r} (ssh, local, slurm, replay)")


class PerHostTransport:
    """Dispatch each host to the transport its inventory entry names (``transport: local|ssh|slurm``)."""

    name = "per-host"

    def __init__(self, transports: dict[str, Transport]) -> None:
        self.transports = transports

    def _for(self, host: Host) -> Transport:
        try:
            return self.transports[host.transport]
        except KeyError:
            raise ValueError(f"host {host.name}: transport {host.transport!r} is not available") from None

    def collect(self, host: Host, commands: Sequence[Command], deadline_s: float) -> HostCollection:
        return self._for(host).collect(host, commands, deadline_s)

    def run(self, host: Host, command: str, timeout_s: float, command_id: str = "adhoc") -> CommandResult:
        return self._for(host).run(host, command, timeout_s, command_id)

    def close(self) -> None:
        """Release what a transport holds across hosts (a running Slurm job step)."""
        for transport in self.transports.values():
            getattr(transport, "close", lambda: None)()
