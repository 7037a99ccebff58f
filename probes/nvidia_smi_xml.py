"""Parser for ``nvidia-smi -q -x`` (command id ``nvidia-smi-q-x``) into the normalized tree.

    log = parse_nvidia_smi_xml(result.text)
    log.gpus[0]["product_name"]            # "NVIDIA A100-SXM4-80GB"
    log.gpus[0]["clocks_event_reasons"]    # {"gpu_idle": "Not Active", "hw_slowdown": ...}

Written against the corpus files in ../shared/corpus/nvidia-smi-xml: driver 418 without a DOCTYPE
(quadro-p400), DTD v12 (a100-sxm4-80gb, driver 535) and v13 with tab indentation (rtx4000-sff-ada,
driver 595), MIG devices, the pre-535 ``clocks_throttle_reasons`` block, the pre-Ampere
``single_bit``/``double_bit`` ECC layout, and the Blackwell fragment with padded values
(" 40 % "). Leaves keep the printed string; "N/A" and "[N/A]" stay as text for the reader.

Robustness: text printed around the document (warnings such as "WARNING: infoROM is corrupted at
gpu ...") is returned as error lines, not a parse failure. ``<supported_clocks>`` and
``<processes>`` are dropped before parsing: we read neither, and some drivers emit malformed
``<supported_clocks>`` (lollipopkit/flutter_server_box#286). A document without its closing
``</nvidia_smi_log>`` is truncated and raises ``ParseError``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from healthcheck.probes.nvidia_smi_log import (
    RENAMED_SECTIONS,
    SmiLog,
    canonical_reason,
    find_nvidia_smi_errors,
    normalize_bus_id,
)

from healthcheck.spec import ParseError

_START = re.compile(r"<\?xml[^>]*\?>|<nvidia_smi_log\b")
_END = "</nvidia_smi_log>"
_DROP = re.compile(r"<(supported_clocks|processes|accounted_processes)>.*?</\1>", re.S)
_REPEATED = {"gpu", "mig_device"}


def parse_nvidia_smi_xml(text: str) -> SmiLog:
    """Parse ``nvidia-smi -q -x`` output; text outside the document is scanned for error lines."""
    start = _START.search(text)
    if start is None:
        errors = find_nvidia_smi_errors(text)
        if errors:
            return SmiLog(None, None, None, (), errors)
        raise ParseError("no <nvidia_smi_log> document in nvidia-smi -q -x output", text)
    end = text.find(_END, start.start())
    if end < 0:
        raise ParseError("nvidia-smi -q -x output is truncated (no </nvidia_smi_log>)", text[-200:])
    outside = text[:start.start()] + "\n" + text[end + len(_END):]
    document = _DROP.sub("", text[start.start():end + len(_END)])
    try:
        root = ET.fromstring(document.encode("utf-8"))
    except (ET.ParseError, LookupError, ValueError) as exc:  # LookupError: a bogus encoding= declaration
        raise ParseError(f"nvidia-smi -q -x output is not well-formed XML: {exc}", document) from exc
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"unexpected XML root <{root.tag}>", document)
    top = _element_tree(root)
    gpus = tuple(_normalize_gpu(gpu) for gpu in top.get("gpu", []))
    return SmiLog(
        driver_version=_text(top.get("driver_version")),
        cuda_version=_text(top.get("cuda_version")),
        attached_gpus=_int(top.get("attached_gpus")),
        gpus=gpus,
        errors=find_nvidia_smi_errors(outside),
    )


def _element_tree(element: ET.Element) -> dict[str, Any]:
    """Element -> dict of child tag -> str (leaf) or dict; ``gpu``/``mig_device`` become lists."""
    out: dict[str, Any] = {}
    for key, value in element.attrib.items():
        out[f"@{key}"] = value.strip()
    for child in element:
        value: Any = _element_tree(child) if len(child) else (child.text or "").strip()
        if child.tag in _REPEATED:
            out.setdefault(child.tag, []).append(value)
        else:
            out[child.tag] = value
    return out


def _normalize_gpu(gpu: dict[str, Any]) -> dict[str, Any]:
    """Rename the fields that changed across drivers; keep the bus id as ``@id``."""
    for old, new in RENAMED_SECTIONS.items():
        if old in gpu and new not in gpu:
            gpu[new] = gpu.pop(old)
    reasons = gpu.get("clocks_event_reasons")
    if isinstance(reasons, dict):
        gpu["clocks_event_reasons"] = {canonical_reason(k): v for k, v in reasons.items()}
    mig = gpu.get("mig_devices")
    gpu["mig_devices"] = mig.get("mig_device", []) if isinstance(mig, dict) else []
    if gpu.get("@id"):
        gpu["@id"] = normalize_bus_id(gpu["@id"])
    return gpu


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None
