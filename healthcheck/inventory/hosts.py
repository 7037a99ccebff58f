"""Inventory: hosts, groups and per-host variables from YAML, hostlists expanded with NodeSet.

    inv = load_inventory(Path("inventories/example.yaml"))
    [h.name for h in inv.hosts]     # ['gpu001', 'gpu002', ...]

File format::

    defaults:                        # vars for every host
      user: root
      profile: h100-sxm5-8x
    groups:
      gpu:
        hosts: gpu[001-064]          # hostlist expression(s): a string or a list
        vars: {port: 22}
    hosts:                           # optional per-host entries (refine a grouped host or add one)
      gpu003: {address: 10.1.0.3}
    controller: slurm-ctl01          # optional: where drain commands run (issue: drain)

Host vars: see ``KNOWN_VARS``; anything else is an error naming the file and the entry, so a
typo like ``adress`` never silently falls back to DNS. Free-form values go under ``extra``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ClusterShell.NodeSet import NodeSet, NodeSetParseError

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.hostnames import host_name_problem
from healthcheck.core.model import Host
from healthcheck.core.suggest import did_you_mean

TOP_KEYS = ("defaults", "groups", "hosts", "controller")
GROUP_KEYS = ("hosts", "vars")
KNOWN_VARS = ("address", "user", "port", "profile", "transport", "slurm_node", "k8s_node", "benchmarks",
              "xid_ignore", "mounts", "services", "nvl_domain", "extra")
TRANSPORTS = ("ssh", "local", "slurm")


def _str(v: Any) -> bool:
    return isinstance(v, str) and v.strip() != ""


def _str_list(v: Any) -> bool:
    return isinstance(v, list) and all(_str(x) for x in v)


def _port(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536


def _xid_list(v: Any) -> bool:  # a list, one number or "13,43" (probes.xid reads all three)
    return isinstance(v, int | str | list) and not isinstance(v, bool)


# Each host var's accepted shape: (test, what the error says was expected). ``mounts: /tmp`` (a string
# where a list is meant) is an error here, not a silently different check on the node.
VAR_TYPES: dict[str, tuple[Any, str]] = {
    "address": (_str, "a host name or IP address"),
    "user": (_str, "a user name"),
    "port": (_port, "a TCP port 1-65535"),
    "profile": (_str, "a profile name"),
    "transport": (lambda v: v in TRANSPORTS, f"one of {', '.join(TRANSPORTS)}"),
    "slurm_node": (_str, "a Slurm node name"),
    "k8s_node": (_str, "a Kubernetes node name"),
    "benchmarks": (lambda v: isinstance(v, Mapping), "a mapping of benchmark settings (nccl: {...})"),
    "xid_ignore": (_xid_list, "a list of Xid numbers"),
    "mounts": (_str_list, "a list of mount points ([/scratch, /home])"),
    "services": (_str_list, "a list of systemd unit names"),
    "nvl_domain": (_str, "the NVLink domain (rack) the host's tray belongs to, e.g. rack07"),
    "extra": (lambda v: isinstance(v, Mapping), "a mapping"),
}


class InventoryError(ValueError):
    """A malformed inventory; the message names the file and the offending entry."""


@dataclass(frozen=True)
class Inventory:
    path: str
    hosts: tuple[Host, ...]
    controller: str | None = None
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)


_BRACKET = re.compile(r"\[([^\]]*)\]")
_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?(?:/\s*(\d+)\s*)?$")


def hostlist_size(text: str) -> int:
    """An upper bound of how many names ``text`` expands to, without expanding it (NodeSet takes
    minutes for ``x[0-99999999]``). Malformed ranges count as 1: NodeSet then names the bad token."""
    total = 0
    for item in re.split(r",(?![^\[]*\])", text):  # top-level commas only
        size = 1
        for group in _BRACKET.findall(item):
            count = 0
            for part in group.split(","):
                m = _RANGE.match(part)
                if m is None:
                    count += 1
                    continue
                first, last, step = int(m[1]), int(m[2] or m[1]), int(m[3] or 1)
                count += max(0, last - first) // max(step, 1) + 1
            size *= max(count, 1)
        total += size
    return total


def expand_hostlist(expr: Any, where: str, max_hosts: int = DEFAULTS.max_hosts) -> list[str]:
    """Expand ``gpu[001-004]``, ``a,b`` or a list of those; errors name the bad token. More than
    ``max_hosts`` names is an error (checked before expanding)."""
    items = expr if isinstance(expr, list) else [expr]
    names: list[str] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, str | int) or str(item).strip() == "":
            raise InventoryError(f"{where}: host entry {item!r} is not a hostname or hostlist")
        text = str(item).strip()
        if len(names) + hostlist_size(text) > max_hosts:
            raise InventoryError(f"{where}: hostlist {text[:80]!r} expands to {hostlist_size(text)} hosts, "
                                 f"more than the limit of {max_hosts} (raise it with --max-hosts)")
        if "[" not in text and "," not in text:
            names.append(text)
            continue
        try:
            names.extend(NodeSet(text, autostep=None))
        except NodeSetParseError as exc:
            raise InventoryError(f"{where}: bad hostlist {text!r}: {exc}") from exc
    return names


def check_host_names(names: Sequence[Any], where: str) -> None:
    """Every name usable, else one ``InventoryError`` naming the first bad one (before any connection)."""
    for name in names:
        problem = host_name_problem(name)
        if problem is not None:
            raise InventoryError(f"{where}: {problem}")


def _check_name(name: str, where: str) -> None:
    check_host_names([name], where)


def _check_vars(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InventoryError(f"{where}: vars must be a mapping, got {raw!r}")
    for key in raw:
        if key not in KNOWN_VARS:
            more = did_you_mean(str(key), KNOWN_VARS) or f" (known: {', '.join(KNOWN_VARS)})"
            raise InventoryError(f"{where}: unknown var {key!r}{more}")
    for key, value in raw.items():
        accepts, expected = VAR_TYPES[key]
        if value is not None and not accepts(value):  # null: explicitly unset (profile: ~ on a login node)
            raise InventoryError(f"{where}: {key} {value!r} is not {expected}")
    return dict(raw)


def _make_host(name: str, group: str | None, values: Mapping[str, Any]) -> Host:
    extra = {k: v for k, v in values.items()
             if k not in ("address", "user", "port", "profile", "transport")}
    return Host(name=name, address=values.get("address"), user=values.get("user"),
                port=values.get("port"), profile=values.get("profile"), group=group,
                transport=values.get("transport", "ssh"), vars=extra)


def parse_inventory(raw: Any, path: str, known_profiles: Sequence[str] | None = None,
                    max_hosts: int = DEFAULTS.max_hosts) -> Inventory:
    """Build an ``Inventory`` from parsed YAML; ``known_profiles`` enables the profile-name check."""
    if not isinstance(raw, Mapping):
        raise InventoryError(f"{path}: top level must be a mapping with {', '.join(TOP_KEYS)}")
    for key in raw:
        if key not in TOP_KEYS:
            raise InventoryError(f"{path}: unknown key {key!r}{did_you_mean(str(key), TOP_KEYS)} "
                                 f"(allowed: {', '.join(TOP_KEYS)})")
    defaults = _check_vars(raw.get("defaults"), f"{path}: defaults")
    placed: dict[str, tuple[str | None, dict[str, Any]]] = {}
    groups: dict[str, tuple[str, ...]] = {}
    for gname, group in (raw.get("groups") or {}).items():
        where = f"{path}: groups.{gname}"
        if not isinstance(group, Mapping):
            raise InventoryError(f"{where}: must be a mapping with hosts and vars")
        for key in group:
            if key not in GROUP_KEYS:
                raise InventoryError(f"{where}: unknown key {key!r} (allowed: {', '.join(GROUP_KEYS)})")
        if "hosts" not in group:
            raise InventoryError(f"{where}: has no hosts")
        gvars = _check_vars(group.get("vars"), f"{where}.vars")
        names = expand_hostlist(group["hosts"], where, max_hosts - len(placed))
        groups[str(gname)] = tuple(names)
        for name in names:
            _check_name(name, where)
            if name in placed:
                raise InventoryError(f"{where}: duplicate host {name!r} (already in group "
                                     f"{placed[name][0]!r})")
            placed[name] = (str(gname), {**defaults, **gvars})
    for expr, hvars in (raw.get("hosts") or {}).items():
        where = f"{path}: hosts.{expr}"
        values = _check_vars(hvars, where)
        for name in expand_hostlist(expr, where, max_hosts - len(placed)):
            _check_name(name, where)
            group, base = placed.get(name, (None, dict(defaults)))
            placed[name] = (group, {**base, **values})
    if not placed:
        raise InventoryError(f"{path}: defines no hosts")
    hosts = tuple(_make_host(n, g, v) for n, (g, v) in placed.items())
    return check_profiles(Inventory(path=path, hosts=hosts, controller=raw.get("controller"), groups=groups),
                           known_profiles)


def check_profiles(inv: Inventory, known_profiles: Sequence[str] | None) -> Inventory:
    if known_profiles is not None:
        for h in inv.hosts:
            if h.profile is not None and h.profile not in known_profiles:
                raise InventoryError(f"{inv.path}: host {h.name!r} has unknown profile {h.profile!r}"
                                     f"{did_you_mean(h.profile, known_profiles)}: `healthcheck profiles list` "
                                     "lists them")
    return inv


check_host_vars = _check_vars  # host vars from other inventory sources are checked the same way
