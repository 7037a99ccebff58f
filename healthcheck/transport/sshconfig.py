"""Resolve how to reach a host: inventory vars first, then the user's ssh_config, then defaults.

    spec = resolve(Host("gpu001", address="10.0.0.1"), load_ssh_config(Path("~/.ssh/config")))
    spec.hostname, spec.port, spec.user, spec.identity_files, spec.proxy_jump, spec.known_hosts_files

Honoured ssh_config keys: HostName, User, Port, IdentityFile, ProxyJump, UserKnownHostsFile,
GlobalKnownHostsFile, ConnectTimeout. ``StrictHostKeyChecking`` is deliberately NOT honoured:
unknown keys are refused unless the run passes ``--accept-new-host-keys``.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from pathlib import Path

import paramiko

from healthcheck.model import Host

DEFAULT_USER_CONFIG = Path("~/.ssh/config")


@dataclass(frozen=True)
class ConnectSpec:
    name: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    proxy_jump: str | None
    known_hosts_files: tuple[str, ...]
    global_known_hosts_files: tuple[str, ...]
    connect_timeout_s: float | None


def load_ssh_config(path: Path | None) -> paramiko.SSHConfig:
    """The ssh_config at ``path`` (``-F``), else ``~/.ssh/config`` when present, else empty."""
    chosen = Path(path).expanduser() if path is not None else DEFAULT_USER_CONFIG.expanduser()
    if not chosen.is_file():
        if path is not None:
            raise FileNotFoundError(f"ssh config {chosen} does not exist")
        return paramiko.SSHConfig()
    try:
        return paramiko.SSHConfig.from_path(str(chosen))
    except paramiko.SSHException as exc:
        raise ValueError(f"ssh config {chosen}: {exc}") from exc


def _split_files(value: str | list[str] | None, default: tuple[str, ...]) -> tuple[str, ...]:
    if not value:
        return default
    items = value if isinstance(value, list) else value.split()
    return tuple(os.path.expanduser(v) for v in items if v.lower() != "none")


def resolve(host: Host, config: paramiko.SSHConfig) -> ConnectSpec:
    entry = config.lookup(host.name)
    hostname = host.address or entry.get("hostname") or host.name
    timeout = entry.get("connecttimeout")
    return ConnectSpec(
        name=host.name,
        hostname=hostname,
        port=int(host.port or entry.get("port") or 22),
        user=host.user or entry.get("user") or getpass.getuser(),
        identity_files=tuple(os.path.expanduser(p) for p in entry.get("identityfile", [])),
        proxy_jump=entry.get("proxyjump"),
        known_hosts_files=_split_files(entry.get("userknownhostsfile"),
                                       (os.path.expanduser("~/.ssh/known_hosts"),)),
        global_known_hosts_files=_split_files(entry.get("globalknownhostsfile"),
                                              ("/etc/ssh/ssh_known_hosts",)),
        connect_timeout_s=float(timeout) if timeout else None,
    )


def parse_jump(jump: str) -> tuple[str | None, str, int | None]:
    """``user@host:port`` (first hop of a ProxyJump list) -> (user, host, port)."""
    first = jump.split(",")[0].strip()
    user, _, rest = first.rpartition("@")
    hostpart, port = rest, None
    if rest.startswith("["):
        hostpart, _, tail = rest[1:].partition("]")
        port = int(tail[1:]) if tail.startswith(":") else None
    elif rest.count(":") == 1:
        hostpart, _, p = rest.partition(":")
        port = int(p)
    return (user or None), hostpart, port
