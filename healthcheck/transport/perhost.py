"""One transport per kind of host in a sweep: each host goes to the transport its inventory entry names.

    PerHostTransport({"ssh": open_transport("ssh"), "local": open_transport("local")}).collect(host, ...)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from healthcheck.core.model import CommandResult, Host, HostCollection
from healthcheck.core.spec import Transport


class PerHostTransport:
    """Dispatch each host by its ``transport`` var (``ssh``, ``local``, ``slurm``)."""

    name = "per-host"

    def __init__(self, transports: Mapping[str, Transport]) -> None:
        self.transports = dict(transports)

    def _for(self, host: Host) -> Transport:
        try:
            return self.transports[host.transport]
        except KeyError:
            raise ValueError(f"host {host.name}: transport {host.transport!r} is not available") from None

    def collect(self, host: Host, commands: Sequence[Any], deadline_s: float) -> HostCollection:
        return self._for(host).collect(host, commands, deadline_s)

    def run(self, host: Host, command: str, timeout_s: float, command_id: str = "adhoc") -> CommandResult:
        return self._for(host).run(host, command, timeout_s, command_id)

    def close(self) -> None:
        """Release what a transport holds across hosts (a running Slurm job step)."""
        for transport in self.transports.values():
            getattr(transport, "close", lambda: None)()
