"""The normalized nvidia-smi tree that both parsers produce, and nvidia-smi's own error lines.

    log = parse_nvidia_smi_xml(text)          # or parse_nvidia_smi_q(text) for the text form
    log.driver_version                         # "535.54.03"
    tree_get(log.gpus[0], "pci/pci_gpu_link_info/link_widths/current_link_width")   # "16x"
    find_nvidia_smi_errors("Unable to determine the device handle for GPU0000:A1:00.0: Unknown Error")
    # (SmiError(kind='gpu_lost', bus_id='00000000:A1:00.0', ...),)

A GPU's tree is a mapping (a plain dict; for an XML report, an ``IndexedTree`` that reads it through
the layout reports with the same tags share) keyed by the XML tag names of ``nvidia-smi -q -x`` (nvsmi_device
DTD v10-v13); the text parser translates its labels onto the same names, and both rename the
fields that changed across drivers (``clocks_throttle_reasons`` -> ``clocks_event_reasons``,
``power_readings`` -> ``gpu_power_readings``), so one reader (``probes/gpu_model.py``) serves both.
Leaves are the strings as printed ("81920 MiB", "N/A", "Unknown Error").

Error lines are the ones nvidia-smi prints instead of (or before) its report; each message below
was seen in real output: driver not loaded (NVIDIA/nvidia-docker#988), "Failed to initialize
NVML: Driver/library version mismatch" (anderskm/gputil#55, rc 18), "No devices were found"
(NVIDIA/open-gpu-kernel-modules#862), "Unable to determine the device handle for GPU...: Unknown
Error" (corpus nvidia-smi/unable-to-determine-device-handle-...) or "...: GPU is lost" (JosephKJ/
OWOD#81), "WARNING: infoROM is corrupted at gpu ..." (NVIDIA/gpu-operator#20, rc 14).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.probes.parse_memo import memoized

# Values nvidia-smi prints when it has no number; "Unknown Error" means it asked and failed.
NOT_AVAILABLE = frozenset({"n/a", "[n/a]", "not supported", "[not supported]", "",
                           "requested functionality has been deprecated",
                           "[requested functionality has been deprecated]"})
UNREADABLE = frozenset({"unknown error", "[unknown error]", "gpu is lost", "[gpu is lost]",
                        "gpu requires reset", "[gpu requires reset]"})


class IndexedTree(Mapping[str, Any]):
    """A GPU's normalized tree held as the layout that reports with the same tags share and one report's
    texts: in ``tree`` each leaf is the index of its text in ``texts`` (an attribute or an empty element
    keeps its own text). Read as a Mapping it is the tree it stands for (a leaf its text stripped, a
    section an ``IndexedTree`` too); a reader that walks ``tree`` itself looks up only the texts it reads,
    and the report's whole tree is never built."""

    __slots__ = ("texts", "tree")

    def __init__(self, tree: dict[str, Any], texts: list[str]) -> None:
        self.tree, self.texts = tree, texts

    def __getitem__(self, key: str) -> Any:
        return indexed_value(self.tree[key], self.texts)

    def __contains__(self, key: object) -> bool:
        return key in self.tree

    def __iter__(self) -> Iterator[str]:
        return iter(self.tree)

    def __len__(self) -> int:
        return len(self.tree)

    def __repr__(self) -> str:
        return repr(plain_tree(self))


def indexed_value(value: Any, texts: list[str]) -> Any:
    """A node of an ``IndexedTree``'s layout as the tree it stands for has it."""
    if type(value) is int:
        return texts[value].strip()
    if type(value) is dict:
        return IndexedTree(value, texts)
    if type(value) is list:
        return [indexed_value(item, texts) for item in value]
    return value


def plain_tree(value: Any) -> Any:
    """A tree (an ``IndexedTree`` or its values) as plain dicts, lists and strings."""
    if isinstance(value, Mapping):
        return {key: plain_tree(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_tree(item) for item in value]
    return value


@dataclass(frozen=True)
class SmiError:
    """One error nvidia-smi reported about the node or one GPU (``bus_id`` set for the latter).

    ``kind`` is one of: driver_not_loaded, driver_mismatch, nvml_init, no_devices, gpu_lost,
    inforom_corrupted, exit_code (a non-zero rc with no recognisable message).
    """

    kind: str
    message: str
    bus_id: str | None = None


@dataclass(frozen=True)
class SmiLog:
    """One nvidia-smi report, normalized. ``fragment`` is True for an excerpt without GPU headers
    (one GPU's sections pasted alone); its single GPU then has no bus id and the count is unknown."""

    driver_version: str | None
    cuda_version: str | None
    attached_gpus: int | None
    gpus: tuple[Mapping[str, Any], ...]
    errors: tuple[SmiError, ...] = ()
    fragment: bool = False


_ERROR_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("driver_not_loaded", re.compile(r"NVIDIA-SMI has failed because it couldn.t communicate with the "
                                     r"NVIDIA driver", re.I)),
    ("driver_mismatch", re.compile(r"Failed to initialize NVML: Driver/library version mismatch", re.I)),
    ("no_devices", re.compile(r"Failed to initialize NVML: No supported GPUs were found|"
                              r"^No devices were found", re.I)),
    ("nvml_init", re.compile(r"Failed to initialize NVML: .+", re.I)),
    ("gpu_lost", re.compile(r"Unable to determine the device handle for (?:GPU|gpu)\s*"
                            r"(?P<bus>[0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*:", re.I)),
    ("inforom_corrupted", re.compile(r"infoROM is corrupted at gpu\s*"
                                     r"(?P<bus>[0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])", re.I)),
)

# nvidia-smi(1) RETURN VALUE; the same numbers as NVML's nvmlReturn_t.
EXIT_CODES = {2: "invalid argument", 3: "operation not available on this GPU", 4: "no permission",
              6: "query unsuccessful", 8: "external power cables not attached",
              9: "NVIDIA driver is not loaded", 10: "kernel detected an interrupt issue with a GPU",
              12: "NVML shared library not found", 14: "infoROM is corrupted",
              15: "GPU has fallen off the bus or is otherwise inaccessible",
              18: "driver/library version mismatch", 255: "other error or internal driver error"}


def normalize_bus_id(bus: str) -> str:
    """``0000:a1:00.0`` / ``GPU0000:A1:00.0`` / ``00000000:A1:00.0`` -> ``00000000:A1:00.0``."""
    bus = bus.strip().upper().removeprefix("GPU").strip()
    domain, sep, rest = bus.partition(":")
    if not sep:
        return bus
    return f"{domain.zfill(8)}:{rest}"


def find_nvidia_smi_errors(text: str) -> tuple[SmiError, ...]:
    """Every recognised nvidia-smi error line in ``text`` (stdout and stderr together), in order."""
    found: list[SmiError] = []
    for raw in text.splitlines():
        line = raw.strip()
        for kind, pattern in _ERROR_PATTERNS:
            match = pattern.search(line)
            if match:
                bus = match.groupdict().get("bus")
                found.append(SmiError(kind=kind, message=line[match.start():],
                                      bus_id=normalize_bus_id(bus) if bus else None))
                break
    return tuple(dict.fromkeys(found))


def exit_code_error(rc: int | None, text: str) -> SmiError | None:
    """An ``exit_code`` error for a non-zero rc that printed no recognised message."""
    if rc in (None, 0):
        return None
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    meaning = EXIT_CODES.get(rc, "unknown exit code")
    return SmiError(kind="exit_code", message=f"nvidia-smi exit code {rc} ({meaning})"
                                              + (f": {first[:160]}" if first else ""))


def tree_get(tree: Mapping[str, Any], path: str) -> Any:
    """The value at ``a/b/c`` in a normalized tree, or None when any step is missing."""
    node: Any = tree
    for part in path.split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def tree_set(tree: dict[str, Any], path: str, value: Any) -> None:
    """Set ``a/b/c`` in a normalized tree, creating dicts on the way (an existing leaf is replaced)."""
    parts = path.split("/")
    node = tree
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


# Field names that changed across drivers, mapped onto one name (old -> new).
RENAMED_SECTIONS = {"clocks_throttle_reasons": "clocks_event_reasons", "power_readings": "gpu_power_readings"}
_REASON_PREFIX = re.compile(r"^clocks_(?:throttle|event)_reason_")


@memoized(256, typed=False)  # a handful of tags, read for every GPU
def canonical_reason(tag: str) -> str:
    """``clocks_throttle_reason_hw_slowdown`` / ``clocks_event_reason_hw_slowdown`` -> ``hw_slowdown``."""
    return _REASON_PREFIX.sub("", tag)
