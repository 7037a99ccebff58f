"""Which hosts a run grades: ``--limit`` over the run's hosts, and the hosts a bundle's manifest lists.

    limit_hosts(hosts, ["gpu[001-004]", "rack-b"])   # nodesets or group names; unmatched names raise
    manifest_hosts(Path("runs/20261122T031500Z/manifest.json"))

Both raise on bad input (``SelectionError``, ``RunDirError``): the CLI turns that into a one-line usage
error (exit 2), never a traceback and never an empty selection that exits 0.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from healthcheck.core.model import Host
from healthcheck.core.suggest import did_you_mean
from healthcheck.inventory.hosts import expand_hostlist
from healthcheck.store.rundir import RunDirError


class SelectionError(ValueError):
    """``--limit`` names hosts the run does not have (a usage error, exit 2)."""


def limit_names(limit: Sequence[str]) -> set[str]:
    """The host names a ``--limit`` value spells out (nodesets expanded; group names stay as given)."""
    return set(expand_hostlist([p for item in limit for p in str(item).split()], "--limit")) if limit else set()


def limit_hosts(hosts: Sequence[Host], limit: Sequence[str], strict: bool = True) -> list[Host]:
    """The hosts named by ``limit``: nodesets (``gpu[001-004]``, ``a,b``) or group names.

    Every name must match: a mistyped name is not silently dropped (the operator would believe it
    was checked), and an empty selection is refused. ``strict=False`` (a ``--rerun-failed`` list of
    hosts that may have left the inventory) only filters."""
    patterns = [p for item in limit for p in str(item).split()]
    if not strict:
        wanted = limit_names(patterns)
        return [h for h in hosts if h.name in wanted]
    if not patterns:
        raise SelectionError("--limit is empty: it selects no host")
    groups = {h.group for h in hosts if h.group}
    group_names = {p for p in patterns if p in groups}
    node_patterns = [p for p in patterns if p not in groups]
    wanted = set(expand_hostlist(node_patterns, "--limit")) if node_patterns else set()
    known = {h.name for h in hosts}
    missing = sorted(wanted - known)
    if missing:
        shown = ", ".join(missing[:8]) + (f" ... {len(missing) - 8} more" if len(missing) > 8 else "")
        listed = f"; groups: {', '.join(sorted(groups))}" if groups else "; the inventory has no groups"
        raise SelectionError(f"--limit: {len(missing)} name(s) match no host or group of the run: {shown}"
                             f"{did_you_mean(missing[0], known | groups, n=2)}{listed}; "
                             f"the run has {len(known)} host(s)")
    selected = [h for h in hosts if h.name in wanted or h.group in group_names]
    if not selected:
        raise SelectionError(f"--limit {' '.join(patterns)} selects no host")
    return selected


def manifest_hosts(manifest: Path) -> list[Host]:
    """The ``hosts`` of a run's manifest: a list of host objects, each with a ``name`` string.
    Anything else is a ``RunDirError`` naming the file and the bad entry (a usage error, exit 2)."""
    try:
        document = json.loads(manifest.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunDirError(f"{manifest}: not a readable JSON manifest ({exc})") from exc
    listed = document.get("hosts", []) if isinstance(document, dict) else None
    if not isinstance(listed, list):
        raise RunDirError(f"{manifest}: 'hosts' must be a list of host objects, got {type(listed).__name__}")
    fields = set(Host.__dataclass_fields__)
    hosts = []
    for index, entry in enumerate(listed):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise RunDirError(f"{manifest}: hosts[{index}] must be an object with a 'name', got {entry!r:.80}")
        unknown = sorted(set(entry) - fields)
        if unknown:
            raise RunDirError(f"{manifest}: hosts[{index}] has unknown key(s) {', '.join(unknown)}")
        vars_ = entry.get("vars") or {}
        if not isinstance(vars_, dict):
            raise RunDirError(f"{manifest}: hosts[{index}].vars must be an object")
        hosts.append(Host(**{**entry, "vars": vars_}))
    return hosts
