"""Ansible inventories as a host source: ``ansible-inventory --list`` JSON, or INI/YAML files through it.

    inv = load_ansible_inventory(Path("hosts.ini"))       # runs: ansible-inventory -i hosts.ini --list
    inv = load_ansible_inventory(Path("inventory.json"))  # saved `ansible-inventory --list` output
    [(h.name, h.address, h.user, h.port, h.group) for h in inv.hosts]

Mapping (``ansible-inventory --list`` JSON: ``_meta.hostvars`` plus groups with ``hosts``/``children``):

- ``ansible_host`` -> address, ``ansible_user`` -> user, ``ansible_port`` -> port (the older
  ``ansible_ssh_host``/``_user``/``_port`` too); ``ansible_connection=local`` -> transport local;
- our host vars by name, or prefixed ``healthcheck_`` (``healthcheck_profile`` wins over ``profile``),
  checked like in our YAML; every other variable (other roles' settings) is kept under ``extra``;
- a host's group is the first group that lists it directly, walking ``all``'s children in order
  (``ungrouped`` gives none); every group with its hosts, nested groups expanded, is in ``groups``.

Our own YAML is told apart by its top-level keys (``defaults``, ``groups``, ``hosts``,
``controller``); anything else is handed to the real ``ansible-inventory`` (argv, no shell). Like
``ansible -i``, an executable inventory file is a dynamic inventory script and is run by it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from healthcheck.core.model import Host
from healthcheck.inventory.hosts import (
    KNOWN_VARS,
    TOP_KEYS,
    Inventory,
    InventoryError,
    check_host_names,
    check_host_vars,
)

ANSIBLE_INVENTORY = "ansible-inventory"
TIMEOUT_S = 120.0
PREFIX = "healthcheck_"
CONNECTION = {"ansible_host": "address", "ansible_ssh_host": "address", "ansible_user": "user",
              "ansible_ssh_user": "user", "ansible_port": "port", "ansible_ssh_port": "port"}


def is_ours(raw: Any) -> bool:
    """True for our YAML inventory format: a mapping with one of our top-level keys and no Ansible
    ``all`` (a typo beside ``defaults`` still gets our error naming it)."""
    return isinstance(raw, Mapping) and "all" not in raw and any(key in TOP_KEYS for key in raw)


def is_ansible_list(raw: Any) -> bool:
    """True for ``ansible-inventory --list`` JSON (it always has ``_meta.hostvars`` and ``all``)."""
    return isinstance(raw, Mapping) and isinstance(raw.get("_meta"), Mapping) and "all" in raw


def run_ansible_inventory(path: Path, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """``ansible-inventory -i PATH --list``, parsed; errors name the file and what Ansible said."""
    tool = shutil.which(ANSIBLE_INVENTORY)
    if tool is None:
        raise InventoryError(f"{path}: not a healthcheck inventory, and {ANSIBLE_INVENTORY} (Ansible) is not "
                             "installed to read it as an Ansible inventory")
    try:
        proc = subprocess.run([tool, "-i", str(path), "--list"], capture_output=True, text=True,
                              timeout=timeout_s, stdin=subprocess.DEVNULL,
                              env={**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True"})
    except subprocess.TimeoutExpired as exc:
        raise InventoryError(f"{path}: {ANSIBLE_INVENTORY} did not answer within {timeout_s:g} s") from exc
    said = " ".join(proc.stderr.split())[:500]
    if proc.returncode != 0:
        raise InventoryError(f"{path}: {ANSIBLE_INVENTORY} failed (exit {proc.returncode}): {said}")
    try:
        return dict(json.loads(proc.stdout))
    except (ValueError, TypeError) as exc:
        raise InventoryError(f"{path}: {ANSIBLE_INVENTORY} printed no JSON: {said}") from exc


def _members(raw: Mapping[str, Any], group: str, seen: frozenset[str] = frozenset()) -> list[str]:
    """Hosts of ``group`` and its children, in order, each once (cycles cut)."""
    entry = raw.get(group) if isinstance(raw.get(group), Mapping) else {}
    names = [str(h) for h in entry.get("hosts") or ()]
    for child in entry.get("children") or ():
        if child not in seen:
            names += _members(raw, str(child), seen | {group})
    return list(dict.fromkeys(names))


def _first_groups(raw: Mapping[str, Any]) -> dict[str, str]:
    """host -> the first group that lists it directly, walking ``all``'s children depth-first."""
    first: dict[str, str] = {}
    stack = [str(c) for c in reversed((raw.get("all") or {}).get("children") or ())]
    visited: set[str] = set()
    while stack:
        group = stack.pop()
        if group in visited:
            continue
        visited.add(group)
        entry = raw.get(group) if isinstance(raw.get(group), Mapping) else {}
        for host in entry.get("hosts") or ():
            first.setdefault(str(host), group)
        stack += [str(c) for c in reversed(entry.get("children") or ())]
    return first


def host_from_vars(name: str, group: str | None, hostvars: Mapping[str, Any], where: str) -> Host:
    """One Ansible host's variables as our ``Host`` (see the module docstring for the mapping)."""
    check_host_names([name], where)  # it names a folder in the run directory and reaches ssh
    ours: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in hostvars.items():
        if key in CONNECTION:
            ours.setdefault(CONNECTION[key], value)
        elif key == "ansible_connection":
            if value == "local":
                ours.setdefault("transport", "local")
        elif key.startswith(PREFIX) and key[len(PREFIX):] in KNOWN_VARS:
            ours[key[len(PREFIX):]] = value  # the prefixed name wins over a plain one
        elif key in KNOWN_VARS and key not in ("address", "user", "port"):
            ours.setdefault(key, value)
        elif not key.startswith("ansible_"):
            extra[key] = value
    if isinstance(ours.get("port"), str) and ours["port"].isdigit():
        ours["port"] = int(ours["port"])
    values = check_host_vars(ours, f"{where}: host {name}")
    if extra:
        values["extra"] = {**extra, **(values.get("extra") or {})}
    rest = {k: v for k, v in values.items() if k not in ("address", "user", "port", "profile", "transport")}
    return Host(name=name, address=values.get("address"), user=values.get("user"), port=values.get("port"),
                profile=values.get("profile"), group=group, transport=values.get("transport", "ssh"), vars=rest)


def parse_ansible_list(raw: Mapping[str, Any], path: str) -> Inventory:
    """An ``Inventory`` from ``ansible-inventory --list`` JSON."""
    if not is_ansible_list(raw):
        raise InventoryError(f"{path}: not ansible-inventory --list output (no _meta.hostvars and all)")
    hostvars = raw["_meta"].get("hostvars") or {}
    names = list(dict.fromkeys([*_members(raw, "all"), *hostvars]))
    if not names:
        raise InventoryError(f"{path}: the Ansible inventory defines no hosts")
    first = _first_groups(raw)
    hosts = tuple(host_from_vars(n, None if first.get(n) in (None, "ungrouped") else first[n],
                                 hostvars.get(n) or {}, path) for n in names)
    groups = {str(g): tuple(_members(raw, str(g))) for g in raw if g not in ("_meta", "all", "ungrouped")}
    return Inventory(path=path, hosts=hosts, groups=groups)


def load_ansible_inventory(path: Path, raw: Any = None) -> Inventory:
    """From saved ``--list`` JSON (``raw`` when already parsed) or, for INI/YAML files, by running
    ``ansible-inventory``."""
    if raw is not None and is_ansible_list(raw):
        return parse_ansible_list(raw, str(path))
    return parse_ansible_list(run_ansible_inventory(Path(path)), str(path))
