"""Replay transport: the outputs of an earlier run or capture bundle, with no host contacted.

    transport = ReplayTransport(Path("runs/20261122T031500Z"))
    transport.collect(Host("gpu001"), commands, deadline_s=0)   # what gpu001 returned then
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from healthcheck.core.model import CommandResult, Host, HostCollection
from healthcheck.store.bundle import read_bundle_host, read_referenced_host
from healthcheck.store.rundir import host_names, raw_dir, referenced_hosts
from healthcheck.transport.registry import TransportError, TransportSettings, register


class ReplayTransport:
    """Reads each host's folder when that host is collected: memory stays flat in the bundle's size."""

    name = "replay"

    def __init__(self, bundle: Path) -> None:
        self.bundle = Path(bundle)
        self.raw = raw_dir(self.bundle)
        self.names = frozenset(host_names(self.bundle))
        self.refs = referenced_hosts(self.raw)  # a merged run's hosts, read in their node bundles

    def _read(self, name: str) -> HostCollection | None:
        if name in self.refs:
            return read_referenced_host(self.refs[name], name)
        return read_bundle_host(self.raw, name) if name in self.names else None  # links refused

    def collect(self, host: Host, commands: Sequence[object], deadline_s: float) -> HostCollection:
        found = self._read(host.name)
        if found is None:
            return HostCollection(host=host.name, results={},
                                  transport_error=f"host {host.name} is not in bundle {self.bundle}")
        return found

    def run(self, host: Host, command: str, timeout_s: float, command_id: str = "adhoc") -> CommandResult:
        found = self._read(host.name)
        if found and command_id in found.results:
            return found.results[command_id]
        return CommandResult(host=host.name, command_id=command_id,
                             transport_error=f"no {command_id} output for {host.name} in {self.bundle}")


@register("replay")
def open_replay(settings: TransportSettings) -> ReplayTransport:
    if settings.bundle is None:
        raise TransportError("the replay transport needs a bundle directory")
    return ReplayTransport(settings.bundle)
