"""Host-key policy for the paramiko client, and SSH errors as one line an operator can act on.

    known = index.lookup(files, "[10.0.0.7]:2222")
    load_known_keys(client, known, "[10.0.0.7]:2222")           # only this host's keys reach paramiko
    client.set_missing_host_key_policy(host_key_policy(known, name, index, accept_new_path))

Keys are named by their SHA256 fingerprint, as OpenSSH names them (``ssh-ed25519 SHA256:...``); the
first base64 characters of a key are the same for every ed25519 key and identify nothing.
"""

from __future__ import annotations

import socket
from typing import Any

import paramiko

from healthcheck.transport.knownhosts import KnownHostsIndex, KnownKey, fingerprint_sha256


class HostKeyError(paramiko.SSHException):
    pass


def _show(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {fingerprint_sha256(key.asbytes())}"


def load_known_keys(client: paramiko.SSHClient, known: list[KnownKey], paramiko_name: str) -> None:
    """Hand ``client`` the plain (not revoked, not CA) keys of this host under the name paramiko checks."""
    for entry in known:
        if entry.marker:
            continue
        try:
            key = paramiko.PKey.from_type_string(entry.key_type, entry.blob)
        except Exception:  # a key type paramiko lacks (sk-*): OpenSSH could still use it
            continue
        client.get_host_keys().add(paramiko_name, entry.key_type, key)


class _Policy(paramiko.MissingHostKeyPolicy):
    """Refuse a key missing from known_hosts (or record it when ``accept_path`` is set); a revoked key is
    refused in every case."""

    def __init__(self, known: list[KnownKey], name: str, index: KnownHostsIndex, accept_path: str | None) -> None:
        self.known, self.name, self.index, self.accept_path = known, name, index, accept_path

    def missing_host_key(self, client: Any, hostname: str, key: paramiko.PKey) -> None:
        blob = key.asbytes()
        for entry in self.known:
            if entry.marker == "@revoked" and entry.blob == blob:
                raise HostKeyError(f"host key {_show(key)} of {self.name} is REVOKED ({entry.source})")
        if self.accept_path is None:
            ca = " (@cert-authority entries need --ssh-client openssh)" if any(
                e.marker == "@cert-authority" for e in self.known) else ""
            raise HostKeyError(
                f"host key for {self.name} is not in known_hosts ({_show(key)}){ca}; verify it and add it "
                "(ssh-keyscan), or pass --accept-new-host-keys")
        if any(not e.marker for e in self.known):
            raise paramiko.BadHostKeyException(hostname, key, _first_plain(self.known) or key)
        self.index.add(self.accept_path, self.name, key.get_name(), blob)
        client.get_host_keys().add(hostname, key.get_name(), key)


def _first_plain(known: list[KnownKey]) -> paramiko.PKey | None:
    for entry in known:
        if not entry.marker:
            try:
                return paramiko.PKey.from_type_string(entry.key_type, entry.blob)
            except Exception:
                continue
    return None


def host_key_policy(known: list[KnownKey], name: str, index: KnownHostsIndex,
                    accept_path: str | None) -> paramiko.MissingHostKeyPolicy:
    return _Policy(known, name, index, accept_path)


def describe_ssh_error(exc: BaseException, spec: Any) -> str:
    """One line an operator can act on, naming the address and port."""
    where = f"{spec.user}@{spec.hostname}:{spec.port}"
    if isinstance(exc, HostKeyError):
        return f"host key refused for {where}: {exc}"
    if isinstance(exc, paramiko.BadHostKeyException):
        return (f"HOST KEY CHANGED for {where} (known_hosts has {_show(exc.expected_key)}, the host sent "
                f"{_show(exc.key)}): possible man-in-the-middle or reinstalled node; verify and update "
                "known_hosts")
    if isinstance(exc, paramiko.AuthenticationException):
        return f"authentication failed for {where}: {exc}"
    if isinstance(exc, socket.timeout | TimeoutError):
        return f"connect timeout to {where}"
    if isinstance(exc, ConnectionRefusedError | paramiko.ssh_exception.NoValidConnectionsError):
        return f"connection refused by {where} (no sshd listening?)"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve {spec.hostname}: {exc}"
    if isinstance(exc, paramiko.ProxyCommandFailure):
        return f"ProxyCommand for {where} failed: {exc}"
    if isinstance(exc, OSError):
        return f"cannot reach {where}: {exc}"
    return f"ssh to {where} failed: {type(exc).__name__}: {exc}"
