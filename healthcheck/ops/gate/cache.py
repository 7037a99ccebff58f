"""The gate's result cache: an active test that passed is not run again on the same node for a while.

    key = cache_key(profile="h100-sxm5-8x", boot_id=boot_id(), driver="550.90.07", gpus=8)
    fresh = read_cache(path, key, now=time.time(), max_age_s=1800)      # {"gpuperf": CachedTest(...), ...}
    write_cache(path, key, {**fresh, "nccl": CachedTest("nccl", time.time(), findings)})

One JSON file per node (``<cache dir>/<host>.json``, written atomically: temp file + rename). An entry serves
only while it is younger than ``max_age_s`` and its key still matches: the same profile, the same boot (a
reboot or a GPU reset by reboot empties it), the same driver version and GPU count. Only tests whose findings
hold no FAIL and no ERROR are written: a failure is measured again every time. The file is untrusted input:
anything malformed, too large, from the future or for another key is ignored (the tests just run), never an
error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from healthcheck.core.model import Finding, Status

SCHEMA = "healthcheck.gate-cache/1"
MAX_BYTES = 4 << 20
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class CachedTest:
    name: str
    at: float                      # epoch seconds when the test ran
    findings: tuple[Finding, ...]


def boot_id(path: Path = BOOT_ID) -> str:
    try:
        return path.read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def cache_key(profile: str, boot_id: str, driver: str | None, gpus: int | None) -> str:
    return f"profile={profile} boot={boot_id} driver={driver or 'unknown'} gpus={gpus if gpus is not None else '?'}"


def cacheable(findings: Sequence[Finding]) -> bool:
    """A test that ran and passed (WARN allowed): no FAIL, no ERROR, and at least one graded finding."""
    return bool(findings) and not any(f.status in (Status.FAIL, Status.ERROR) for f in findings) \
        and any(f.status is not Status.SKIP for f in findings)


def read_cache(path: Path, key: str, now: float, max_age_s: float) -> dict[str, CachedTest]:
    """The fresh entries for ``key``; anything unusable is ignored."""
    if max_age_s <= 0:
        return {}
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
        doc = json.loads(raw.decode("utf-8")) if len(raw) <= MAX_BYTES else None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return {}
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("key") != key:
        return {}
    entries = doc.get("tests")
    out = {}
    for name, entry in (entries.items() if isinstance(entries, dict) else ()):
        test = _entry(str(name), entry)
        if test is not None and 0 <= now - test.at <= max_age_s:
            out[test.name] = test
    return out


def _entry(name: str, entry: object) -> CachedTest | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("at"), int | float) \
            or not isinstance(entry.get("findings"), list):
        return None
    try:
        findings = tuple(Finding.from_json(f) for f in entry["findings"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return CachedTest(name, float(entry["at"]), findings) if cacheable(findings) else None


def write_cache(path: Path, key: str, tests: Mapping[str, CachedTest]) -> Path:
    """Replace the node's cache file with ``tests`` (atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"schema": SCHEMA, "key": key,
           "tests": {t.name: {"at": t.at, "findings": [f.to_json() for f in t.findings]} for t in tests.values()}}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(doc, sort_keys=True) + "\n")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
