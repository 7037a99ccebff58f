"""ssh_config read once per sweep, indexed by host name, resolved per host as OpenSSH resolves it.

    config = load_ssh_config(Path("cluster_config"))  # -F FILE; else ~/.ssh/config + /etc/ssh/ssh_config
    spec = resolve(Host("gpu001"), config)            # inventory vars win over ssh_config
    spec.hostname, spec.port, spec.user, spec.jumps, spec.proxy_command, spec.server_alive_interval_s

Read as ssh_config(5) says: first obtained value wins (``IdentityFile`` accumulates); ``Host`` and
``Match host|originalhost|user|localuser|all`` blocks; ``Include`` (globs, ``~``, relative to ~/.ssh,
nested up to 16 deep, conditional inside a block); ``ProxyJump a,b`` (every hop) and ``ProxyCommand``
compete for one slot, whichever comes first. Honoured keys are ``HONOURED``; keys that change how to
authenticate or where to connect and that only OpenSSH implements (``REFUSED``, ``Match exec``...)
make the hosts they apply to an ERROR that names the file and line and points at ``--ssh-client
openssh``; never silently ignored. ``StrictHostKeyChecking`` is deliberately not honoured.

Blocks whose Host patterns are plain names are indexed by name, so a lookup visits only the blocks of
that name plus the wildcard/Match blocks: 4,000 ``Host gpuNNNN`` blocks cost what one does.
"""

from __future__ import annotations

import getpass
import glob
import os
import re
import shlex
import socket
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Host
from healthcheck.transport.sshjump import JumpHop, parse_jumps

DEFAULT_USER_CONFIG = Path("~/.ssh/config")
SYSTEM_CONFIG = Path("/etc/ssh/ssh_config")
MAX_INCLUDE_DEPTH = 16  # OpenSSH READCONF_MAX_DEPTH

HONOURED = ("hostname", "user", "port", "identityfile", "identitiesonly", "proxyjump", "proxycommand",
            "userknownhostsfile", "globalknownhostsfile", "hostkeyalias", "connecttimeout",
            "serveraliveinterval", "serveralivecountmax", "include", "host", "match")
REFUSED = {  # key -> values that are harmless ("" = any value is refused)
    "certificatefile": (), "pkcs11provider": ("none",), "securitykeyprovider": ("internal",),
    "canonicalizehostname": ("no", "none"), "knownhostscommand": ("none",),
}
_ACCUMULATE = ("identityfile", "certificatefile")
_SUPPORTED_MATCH = ("all", "host", "originalhost", "user", "localuser")
_LINE = re.compile(r"\s*([A-Za-z][A-Za-z0-9]*)(?:\s*=\s*|\s+)(.*?)\s*$")


class SshConfigError(ValueError):
    """An ssh_config this client cannot honour; the message names the file and line."""


@dataclass(frozen=True)
class Section:
    """Options that apply when every condition holds: ``("host", patterns)`` or ``("match", criteria)``."""

    conditions: tuple[tuple[str, tuple[str, ...], str], ...]
    options: tuple[tuple[str, str, str], ...]     # (key, raw value, "file:line")


@dataclass
class SshConfig:
    """Sections in file order, indexed: plain ``Host`` names -> sections; the rest checked per lookup."""

    sections: list[Section] = field(default_factory=list)
    by_name: dict[str, list[int]] = field(default_factory=dict)
    always: list[int] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    def add(self, section: Section) -> None:
        index = len(self.sections)
        self.sections.append(section)
        names = _plain_names(section)
        if names is None:
            self.always.append(index)
        else:
            for name in names:
                self.by_name.setdefault(name, []).append(index)

    def candidates(self, name: str) -> list[Section]:
        picked = sorted(set(self.by_name.get(name.lower(), ())) | set(self.always))
        return [self.sections[i] for i in picked]


def _plain_names(section: Section) -> set[str] | None:
    """The names a section can only apply to, or None when it has wildcards, negations or Match."""
    names: set[str] | None = None
    for kind, patterns, _ in section.conditions:
        if kind != "host" or any(p.startswith("!") or "*" in p or "?" in p for p in patterns):
            continue
        plain = {p.lower() for p in patterns}
        names = plain if names is None else names & plain
    return names


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
    jumps: tuple[JumpHop, ...] = ()
    proxy_command: str | None = None
    host_key_alias: str | None = None
    identities_only: bool = False
    server_alive_interval_s: float = DEFAULTS.server_alive_interval_s
    server_alive_count_max: int = DEFAULTS.server_alive_count_max
    configured: frozenset[str] = frozenset()   # the keys ssh_config set for this host


def load_ssh_config(path: Path | None) -> SshConfig:
    """``-F path`` alone when given (as OpenSSH does), else ``~/.ssh/config`` then ``/etc/ssh/ssh_config``."""
    config = SshConfig()
    if path is not None:
        chosen = Path(path).expanduser()
        if not chosen.is_file():
            raise FileNotFoundError(f"ssh config {chosen} does not exist")
        _read(config, chosen, (), Path("~/.ssh").expanduser(), 0)
        return config
    for chosen, base in ((DEFAULT_USER_CONFIG.expanduser(), Path("~/.ssh").expanduser()),
                         (SYSTEM_CONFIG, SYSTEM_CONFIG.parent)):
        if chosen.is_file():
            _read(config, chosen, (), base, 0)
    return config


def _split(value: str, where: str) -> list[str]:
    try:
        return shlex.split(value, comments=False, posix=True)
    except ValueError as exc:
        raise SshConfigError(f"{where}: {exc}") from None


def _read(config: SshConfig, path: Path, outer: tuple, base: Path, depth: int) -> None:
    """Append the sections of ``path`` (conditions ``outer`` apply to all of them) to ``config``."""
    if depth > MAX_INCLUDE_DEPTH:
        raise SshConfigError(f"{path}: Include nested deeper than {MAX_INCLUDE_DEPTH} (a loop?)")
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise SshConfigError(f"ssh config {path}: {exc}") from None
    config.files.append(str(path))
    conditions, options = outer, []
    for number, raw in enumerate(text.splitlines(), 1):
        where = f"{path}:{number}"
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        m = _LINE.match(raw)
        if not m:
            raise SshConfigError(f"{where}: cannot parse {raw.strip()!r}")
        key, value = m[1].lower(), m[2]
        if key in ("host", "match", "include"):
            if options:
                config.add(Section(conditions, tuple(options)))
            options = []
        if key == "host":
            conditions = (*outer, ("host", tuple(_split(value, where)), where))
        elif key == "match":
            conditions = (*outer, ("match", tuple(_split(value, where)), where))
        elif key == "include":
            for pattern in _split(value, where):
                full = os.path.expanduser(pattern)
                full = full if os.path.isabs(full) else str(base / full)
                for match in sorted(glob.glob(full)):
                    _read(config, Path(match), conditions, base, depth + 1)
        else:
            options.append((key, value, where))
    if options:
        config.add(Section(conditions, tuple(options)))


def _pattern_list_matches(value: str, patterns: list[str]) -> bool:
    """OpenSSH match_pattern_list: a negated match fails the list, else any positive match passes."""
    value = value.lower()
    hit = False
    for p in patterns:
        p = p.lower()
        if p.startswith("!"):
            if fnmatchcase(value, p[1:]):
                return False
        elif fnmatchcase(value, p):
            hit = True
    return hit


def _match_applies(criteria: tuple[str, ...], where: str, ctx: dict[str, str]) -> bool:
    items = list(criteria)
    while items:
        word = items.pop(0)
        negate = word.startswith("!")
        word = word[1:].lower() if negate else word.lower()
        if word == "all":
            result = True
        elif word not in _SUPPORTED_MATCH:
            raise SshConfigError(f"{where}: 'Match {word}' is only evaluated by OpenSSH; run with "
                                 "--ssh-client openssh (or remove it from this host's ssh_config)")
        elif not items:
            raise SshConfigError(f"{where}: 'Match {word}' needs an argument")
        else:
            result = _pattern_list_matches(ctx[word], items.pop(0).split(","))
        if result == negate:
            return False
    return True


def _applies(section: Section, ctx: dict[str, str]) -> bool:
    for kind, patterns, where in section.conditions:
        if kind == "host":
            if not _pattern_list_matches(ctx["originalhost"], list(patterns)):
                return False
        elif not _match_applies(patterns, where, ctx):
            return False
    return True


def lookup(config: SshConfig, name: str, user: str | None = None) -> dict[str, list[tuple[str, str]]]:
    """The options that apply to ``name``: key -> [(value, where)] (one item unless it accumulates)."""
    local_user = getpass.getuser()
    found: dict[str, list[tuple[str, str]]] = {}
    for section in config.candidates(name):
        hostname = found.get("hostname", [(name, "")])[0][0]
        ctx = {"originalhost": name, "host": _expand(hostname, {"h": name}, "HostName"),
               "user": user or found.get("user", [(local_user, "")])[0][0], "localuser": local_user}
        if not _applies(section, ctx):
            continue
        for key, value, where in section.options:
            slot = "proxyjump" if key == "proxycommand" else key
            if key in _ACCUMULATE:
                found.setdefault(key, []).append((value, where))
            elif slot not in found:
                found[slot] = [(f"{key} {value}" if slot != key else value, where)]
    return found


def _expand(value: str, tokens: dict[str, str], key: str) -> str:
    def sub(m: re.Match[str]) -> str:
        token = m[1]
        if token == "%":
            return "%"
        if token not in tokens:
            raise SshConfigError(f"{key} {value!r}: token %{token} is not supported here")
        return tokens[token]
    return re.sub(r"%(.)", sub, value)


def _one(found: dict, key: str) -> tuple[str, str] | None:
    """The value of a single-valued key, unquoted (a ProxyCommand stays the raw rest of its line)."""
    if key not in found:
        return None
    value, where = found[key][0]
    if value.startswith("proxycommand "):
        return value, where
    words = _split(value, where)
    return (words[0] if words else ""), where


def _refuse(found: dict) -> None:
    for key, harmless in REFUSED.items():
        for value, where in found.get(key, ()):
            if not harmless or value.strip().lower() not in harmless:
                raise SshConfigError(f"{where}: '{key} {value}' applies to this host and only OpenSSH implements "
                                     "it; run with --ssh-client openssh")


def _files(found: dict, key: str, default: tuple[str, ...], tokens: dict[str, str]) -> tuple[str, ...]:
    if key not in found:
        return default
    got = found[key][0]
    return tuple(os.path.expanduser(_expand(v, tokens, key)) for v in _split(got[0], got[1]) if v.lower() != "none")


def resolve(host: Host, config: SshConfig, allow_jump: bool = True) -> ConnectSpec:
    """Inventory vars first, then ssh_config, then OpenSSH's defaults. Raises ``SshConfigError``."""
    found = lookup(config, host.name, host.user)
    _refuse(found)
    tokens = {"h": host.name, "n": host.name, "d": os.path.expanduser("~"), "u": getpass.getuser(),
              "l": socket.gethostname().split(".")[0], "i": str(os.getuid())}
    hostname = host.address or _expand((_one(found, "hostname") or (host.name, ""))[0], {"h": host.name}, "HostName")
    tokens["h"] = hostname
    port_raw = host.port or (_one(found, "port") or ("22", ""))[0]
    try:
        port = int(port_raw)
    except ValueError:
        where = (_one(found, "port") or ("", "inventory"))[1]
        raise SshConfigError(f"{where}: Port {port_raw!r} is not a number") from None
    user = host.user or (_one(found, "user") or (getpass.getuser(), ""))[0]
    tokens.update(p=str(port), r=user)
    jump_value = _one(found, "proxyjump") if allow_jump else None
    jumps: tuple[JumpHop, ...] = ()
    proxy_command = None
    if jump_value is not None:
        value, where = jump_value
        if value.startswith("proxycommand "):
            command = value.split(" ", 1)[1].strip()
            if command.lower() != "none":
                proxy_command = _expand(command, {k: shlex.quote(tokens[k]) for k in "hnpr"}, "ProxyCommand")
        elif value.strip().lower() != "none":
            jumps = parse_jumps(value, where)
    timeout = _one(found, "connecttimeout")
    alive = _one(found, "serveraliveinterval")
    count = _one(found, "serveralivecountmax")
    alias = _one(found, "hostkeyalias")
    try:
        return ConnectSpec(
            name=host.name, hostname=hostname, port=port, user=user,
            identity_files=tuple(os.path.expanduser(_expand(w, tokens, "IdentityFile"))
                                 for v, where in found.get("identityfile", ()) for w in _split(v, where)[:1]),
            proxy_jump=jump_value[0] if jumps else None,
            known_hosts_files=_files(found, "userknownhostsfile",
                                     (os.path.expanduser("~/.ssh/known_hosts"),
                                      os.path.expanduser("~/.ssh/known_hosts2")), tokens),
            global_known_hosts_files=_files(found, "globalknownhostsfile",
                                            ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"), tokens),
            connect_timeout_s=float(timeout[0]) if timeout and timeout[0].lower() != "none" else None,
            jumps=jumps, proxy_command=proxy_command,
            host_key_alias=alias[0] if alias and alias[0].lower() != "none" else None,
            identities_only=(_one(found, "identitiesonly") or ("no", ""))[0].lower() == "yes",
            server_alive_interval_s=float(alive[0]) if alive else DEFAULTS.server_alive_interval_s,
            server_alive_count_max=int(count[0]) if count else DEFAULTS.server_alive_count_max,
            configured=frozenset(found))
    except ValueError as exc:
        raise SshConfigError(f"ssh_config for {host.name}: {exc}") from None
