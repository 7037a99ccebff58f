"""known_hosts files parsed once per sweep and indexed: an O(1) lookup per host for plain names.

    index = KnownHostsIndex()
    keys = index.lookup(["~/.ssh/known_hosts", "/etc/ssh/ssh_known_hosts"], "[10.0.0.7]:2222")
    [k.fingerprint for k in keys]        # ['SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU']

The format is OpenSSH's sshd(8) "SSH_KNOWN_HOSTS FILE FORMAT": ``[marker] hostnames keytype base64-key
[comment]``. Plain names (``gpu01``, ``[10.0.0.7]:2222``) go into a dict; hashed names (``|1|salt|hmac``,
``HashKnownHosts yes``) and patterns (``*.ib``, ``!bad``) are checked one by one (a salted hash cannot
be indexed), so their cost is linear in their own number only. A file is re-read only when its size or
mtime changes; ``add`` appends a key (``--accept-new-host-keys``) under a lock and updates the index in
place. paramiko's own ``HostKeys.load`` is quadratic in the file size and ran once per connection.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import hmac
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path


def fingerprint_sha256(blob: bytes) -> str:
    """The key fingerprint as OpenSSH prints it (``ssh-keygen -l``): ``SHA256:`` + unpadded base64."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def known_hosts_name(hostname: str, port: int) -> str:
    """The name OpenSSH records and looks up: ``host`` on port 22, ``[host]:port`` otherwise."""
    return hostname if port == 22 else f"[{hostname}]:{port}"


@dataclass(frozen=True)
class KnownKey:
    key_type: str
    blob: bytes
    marker: str       # "" | "@revoked" | "@cert-authority"
    source: str       # "path:line"

    @property
    def fingerprint(self) -> str:
        return fingerprint_sha256(self.blob)


@dataclass
class KnownHostsFile:
    """One parsed file: exact names in a dict, hashed and pattern entries in lists."""

    exact: dict[str, list[KnownKey]] = field(default_factory=dict)
    hashed: list[tuple[bytes, bytes, KnownKey]] = field(default_factory=list)
    patterns: list[tuple[tuple[str, ...], tuple[str, ...], KnownKey]] = field(default_factory=list)
    signature: tuple[int, int] = (0, 0)

    def add_line(self, line: str, source: str) -> None:
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            return
        marker = ""
        if fields[0].startswith("@"):
            marker, fields = fields[0], fields[1:]
        if len(fields) < 3:
            return
        names, key_type, b64 = fields[:3]
        try:
            blob = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            return  # OpenSSH skips a line it cannot decode, so do we
        key = KnownKey(key_type, blob, marker, source)
        if names.startswith("|1|"):
            _, _, salt, digest = [*names.split("|"), "", ""][:4]
            try:
                self.hashed.append((base64.b64decode(salt), base64.b64decode(digest), key))
            except (binascii.Error, ValueError):
                return
            return
        items = [n.lower() for n in names.split(",") if n]
        positive = tuple(n for n in items if not n.startswith("!"))
        negative = tuple(n[1:] for n in items if n.startswith("!"))
        if negative or any(c in n for n in positive for c in "*?"):
            self.patterns.append((positive, negative, key))
        else:
            for name in positive:
                self.exact.setdefault(name, []).append(key)

    def lookup(self, name: str) -> list[KnownKey]:
        name = name.lower()
        found = list(self.exact.get(name, ()))
        encoded = name.encode()
        for salt, digest, key in self.hashed:  # one-shot C HMAC per hashed line
            if hmac.digest(salt, encoded, "sha1") == digest:
                found.append(key)
        for positive, negative, key in self.patterns:
            if any(fnmatch.fnmatchcase(name, p) for p in negative):
                continue
            if any(fnmatch.fnmatchcase(name, p) for p in positive):
                found.append(key)
        return found


def parse_known_hosts(text: str, path: str = "known_hosts") -> KnownHostsFile:
    parsed = KnownHostsFile()
    for number, line in enumerate(text.splitlines(), 1):
        parsed.add_line(line, f"{path}:{number}")
    return parsed


def _signature(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


class KnownHostsIndex:
    """Every known_hosts file a sweep reads, each parsed once; shared by all connections (thread-safe)."""

    def __init__(self) -> None:
        self._files: dict[str, KnownHostsFile] = {}
        self._lock = threading.Lock()

    def _file(self, path: str) -> KnownHostsFile | None:
        real = Path(os.path.expanduser(path))
        sig = _signature(real)
        if sig is None:
            return None
        with self._lock:
            cached = self._files.get(str(real))
            if cached is not None and cached.signature == sig:
                return cached
            text = real.read_bytes().decode("utf-8", errors="replace")
            parsed = parse_known_hosts(text, str(real))
            parsed.signature = sig
            self._files[str(real)] = parsed
            return parsed

    def lookup(self, paths: list[str] | tuple[str, ...], name: str) -> list[KnownKey]:
        """All entries for ``name`` in ``paths``, in file order (revoked and CA entries included)."""
        found: list[KnownKey] = []
        for path in paths:
            parsed = self._file(path)
            if parsed is not None:
                found.extend(parsed.lookup(name))
        return found

    def add(self, path: str, name: str, key_type: str, blob: bytes) -> None:
        """Append ``name key_type key`` to ``path`` (created 0600 with its folder) and index it."""
        real = Path(os.path.expanduser(path))
        line = f"{name} {key_type} {base64.b64encode(blob).decode()}\n"
        with self._lock:
            real.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(real, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a") as fh:
                fh.write(line)
            cached = self._files.get(str(real))
            if cached is not None:
                cached.add_line(line, f"{real}:appended")
                cached.signature = _signature(real) or cached.signature
