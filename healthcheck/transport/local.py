"""Local transport: run the framed script with ``sh -c`` on this machine (``--local`` runs).

    LocalTransport(cap=4 << 20).collect(Host("localhost", transport="local"), commands, deadline_s=60)
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import CommandResult, Host, HostCollection
from healthcheck.transport.process import pipe_reader, stop_group
from healthcheck.transport.registry import TransportSettings, register
from healthcheck.transport.script import Command, build_script, new_marker
from healthcheck.transport.stream import host_failure, read_framed


class LocalTransport:
    name = "local"

    def __init__(self, cap: int = DEFAULTS.output_cap_bytes, kill_after_s: float = DEFAULTS.kill_after_s):
        self.cap = cap
        self.kill_after_s = kill_after_s

    def collect(self, host: Host, commands: Sequence[Command], deadline_s: float) -> HostCollection:
        marker = new_marker()
        script = build_script(commands, marker, self.cap, self.kill_after_s)
        try:
            proc = subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
        except OSError as exc:
            return host_failure(host.name, commands, f"cannot start sh: {exc}")
        try:
            return read_framed(host.name, commands, marker, pipe_reader(proc), deadline_s,
                               byte_limit=2 * self.cap * max(1, len(commands)) + (1 << 20))
        finally:
            stop_group(proc, grace_s=2.0)

    def run(self, host: Host, command: str, timeout_s: float, command_id: str = "adhoc") -> CommandResult:
        collection = self.collect(host, [Command(command_id, command, timeout_s)],
                                  deadline_s=timeout_s + self.kill_after_s + 10)
        return collection.results[command_id]


@register("local")
def open_local(settings: TransportSettings) -> LocalTransport:
    return LocalTransport(cap=settings.cap)
