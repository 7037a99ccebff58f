"""Replay transport: the outputs of an earlier run or capture bundle, with no host contacted.

    transport = ReplayTransport(Path("runs/20261122T031500Z"))
    transport.collect(Host("gpu001"), commands, deadline_s=0)   # what gpu001 returned then
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from healthcheck.bundle import read_bundle
from healthcheck.model import CommandResult, Host, HostCollection


class ReplayTransport:
    name = "replay"

    def __init__(self, bundle: Path) -> None:
        self.bundle = Path(bundle)
        self.hosts = read_bundle(self.bundle)

    def collect(self, host: Host, commands: Sequence[object], deadline_s: float) -> HostCollection:
        found = self.hosts.get(host.name)
        if found is None:
            return HostCollection(host=host.name, results={},
                                  transport_error=f"host {host.name} is not in bundle {self.bundle}")
        return found

    def run(self, host: Host, command: str, timeout_s: float, command_id: str = "adhoc") -> CommandResult:
        found = self.hosts.get(host.name)
        if found and command_id in found.results:
            return found.results[command_id]
        return CommandResult(host=host.name, command_id=command_id,
                             transport_error=f"no {command_id} output for {host.name} in {self.bundle}")
