"""Load an inventory file: our YAML format, or an Ansible inventory, read with bounds.

    inv = load_inventory(Path("inventories/example.yaml"))
    [h.name for h in inv.hosts]     # ['gpu001', 'gpu002', ...]

The file is read once, with bounded size, nesting and alias expansion; our own YAML is told apart by
its top-level keys (``inventory.hosts``), anything else goes to ``inventory.ansible``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from healthcheck.core.defaults import DEFAULTS
from healthcheck.inventory.ansible import is_ours, load_ansible_inventory
from healthcheck.inventory.hosts import Inventory, InventoryError, check_profiles, parse_inventory


class _LimitError(Exception):
    pass


# libyaml's parser where PyYAML has it: the same safe YAML, read in C (a fleet's inventory on every start)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_OPENS = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSES = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def bounded_yaml(text: str) -> Any:
    """``text`` as YAML of safe types, with bounds checked before anything is built: nesting depth (on the
    parser's events, which need no recursion however deep the text nests: composing them does), and the
    number of values once aliases are expanded (a few hundred bytes of nested ``*ref`` lists otherwise expand
    to 10^8 values in the manifest and the report)."""
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, _OPENS):
            depth += 1
            if depth > DEFAULTS.inventory_max_depth:
                raise _LimitError(f"YAML nested deeper than {DEFAULTS.inventory_max_depth} levels")
        elif isinstance(event, _CLOSES):
            depth -= 1
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded(node, {})
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded(node: yaml.Node, sizes: dict[int, int]) -> int:
    """The values ``node`` stands for with aliases expanded (each shared node counted once per use); depth is
    bounded before, so the recursion is too."""
    if id(node) not in sizes:
        children = node.value if isinstance(node.value, list) else []
        flat = [c for pair in children for c in pair] if isinstance(node, yaml.MappingNode) else children
        sizes[id(node)] = 1 + sum(_expanded(c, sizes) for c in flat)
        if sizes[id(node)] > DEFAULTS.inventory_max_values:
            raise _LimitError(f"YAML expands to more than {DEFAULTS.inventory_max_values} values "
                              "(aliases included): an alias bomb?")
    return sizes[id(node)]


def load_inventory(path: Path, known_profiles: Sequence[str] | None = None,
                   max_hosts: int = DEFAULTS.max_hosts) -> Inventory:
    """Our YAML, or an Ansible inventory (``--list`` JSON, INI/YAML files: ``inventory.ansible``);
    every problem is one ``InventoryError`` naming the file."""
    path = Path(path)
    if path.is_dir():
        raise InventoryError(f"inventory {path} is a directory, not a YAML file")
    try:
        if path.stat().st_size > DEFAULTS.inventory_max_bytes:
            raise InventoryError(f"inventory {path} is larger than {DEFAULTS.inventory_max_bytes} bytes")
        raw = bounded_yaml(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InventoryError(f"inventory {path} does not exist") from exc
    except _LimitError as exc:
        raise InventoryError(f"{path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise InventoryError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise InventoryError(f"inventory {path} cannot be read: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        if path.suffix in (".yaml", ".yml", ".json"):
            raise InventoryError(f"{path}: not valid YAML: {exc}") from exc
        raw = None  # an INI file: Ansible's format
    if not is_ours(raw):
        return check_profiles(load_ansible_inventory(path, raw), known_profiles)
    return parse_inventory(raw, str(path), known_profiles, max_hosts)


