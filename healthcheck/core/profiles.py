"""Hardware profiles: the expectations for one kind of node, loaded from YAML.

    profile = load_profile("h100-sxm5-8x", search=[Path("inventories/profiles")])
    profile.expect("gpu.count")  # Expectation(op='eq', value=8, unit='GPUs', source='...')

A profile file::

    name: h100-sxm5-8x
    description: 8x H100 SXM5 80GB, NVSwitch
    inherits: base-gpu-node            # optional: start from another profile's expectations
    expect:
      gpu.count: {op: eq, value: 8, unit: GPUs, source: "H100 datasheet"}
      thermal.gpu_temp_c: {op: le, value: 87, warn: 80, unit: C, source: "..."}
      nccl.all_reduce.busbw_gbps: {value: 480, unit: GB/s, bands: {acceptable: 0.6, warn: 0.5}, source: "..."}
    settings: {...}                    # structured, non-graded facts (e.g. NCCL env, binary paths)
    known_issues:
      - {check: xid.13, reason: "app bug tracked in TICKET-1", expires: 2027-01-31}

Every expectation must name its ``source``; a profile without one is rejected at load time.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from healthcheck.core.suggest import did_you_mean

OPS = ("eq", "ne", "ge", "gt", "le", "lt", "in", "match", "between")
PROJECT_PROFILES = Path(str(files("healthcheck.inventories") / "profiles"))  # the built-in profiles
SITE_DIRS_ENV = "HEALTHCHECK_PROFILES_DIR"  # os.pathsep-separated folders of site profiles
_site_dirs: list[Path] = []


def set_site_dirs(dirs: Iterable[Path]) -> None:
    """Site profile folders (``healthcheck --profiles-dir DIR``), searched before every other folder."""
    _site_dirs[:] = [Path(d) for d in dirs]


def site_dirs() -> list[Path]:
    """The site folders set by ``--profiles-dir``, else those of ``$HEALTHCHECK_PROFILES_DIR``."""
    if _site_dirs:
        return list(_site_dirs)
    return [Path(p) for p in os.environ.get(SITE_DIRS_ENV, "").split(os.pathsep) if p.strip()]


def search_path(search: Iterable[Path] = ()) -> list[Path]:
    """Where profiles are looked up, first match wins: site folders, ``search``, then the built-in ones."""
    return [*site_dirs(), *(Path(s) for s in search), PROJECT_PROFILES]


class ProfileError(ValueError):
    """A profile file is malformed; the message names the file and the bad entry."""


@dataclass(frozen=True)
class Expectation:
    """One graded expectation. ``warn`` is an optional tighter threshold that gives WARN."""

    key: str
    source: str
    op: str = "ge"
    value: Any = None
    unit: str | None = None
    warn: Any = None
    bands: Mapping[str, float] | None = None
    severity: str = "FAIL"
    required: bool = False
    note: str | None = None
    observe: bool = False       # observe-only: graded and reported, never in a verdict, a drain or the exit code


@dataclass(frozen=True)
class KnownIssue:
    check: str
    reason: str
    expires: date | None = None
    hosts: tuple[str, ...] = ()

    def active(self, today: date) -> bool:
        return self.expires is None or today <= self.expires


@dataclass(frozen=True)
class Profile:
    name: str
    description: str = ""
    expectations: Mapping[str, Expectation] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    known_issues: tuple[KnownIssue, ...] = ()
    path: str | None = None
    observe: tuple[str, ...] = ()   # check ids or globs that are observe-only (``observe:`` list + ``observe: true``)

    def expect(self, key: str) -> Expectation | None:
        return self.expectations.get(key)

    def setting(self, dotted: str, default: Any = None) -> Any:
        """A value from ``settings`` by dotted path, e.g. ``nccl.env``."""
        node: Any = self.settings
        for part in dotted.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return node


EMPTY_PROFILE = Profile(name="(none)", description="host has no profile")


def profile_digest(profile: Profile) -> str:
    """``sha256:<hex>`` of the profile as graded (canonical JSON: sorted keys, no spaces; its file
    ``path`` left out, which differs between a node and the merging host): two machines with the same
    resolved profile, host vars included (``core.hostvars.host_profile``), get the same digest."""
    doc = {k: v for k, v in asdict(profile).items() if k != "path"}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
_EXPECTATION_KEYS = {"op", "value", "unit", "warn", "bands", "severity", "required", "note", "source", "observe"}
_PROFILE_KEYS = {"name", "description", "inherits", "expect", "settings", "known_issues", "observe"}
_INVENTORY_KEYS = {"defaults", "groups", "hosts", "controller"}  # an inventory's top level (inventory/hosts.py)


def _unknown_keys(keys: Iterable[Any], allowed: set[str]) -> list[str]:
    """``'x' (did you mean 'y'?)`` for every key not in ``allowed``."""
    out = []
    for key in sorted(map(str, keys)):
        if key in allowed:
            continue
        more = did_you_mean(key, allowed) or f" (allowed: {', '.join(sorted(allowed))})"
        out.append(f"{key!r}{more}")
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def expectation_problems(key: str, raw: Any) -> list[str]:
    """Everything wrong with one ``expect`` entry: unknown keys, wrong types, no source."""
    if not isinstance(raw, Mapping):
        return [f"expectation {key!r} must be a mapping, got {raw!r}"]
    problems = [f"expectation {key!r} has unknown key {k}" for k in _unknown_keys(raw, _EXPECTATION_KEYS)]
    if not isinstance(raw.get("source"), str) or not raw["source"].strip():
        problems.append(f"expectation {key!r} has no source (every threshold cites a datasheet or document)")
    op = raw.get("op", "ge")
    value = raw.get("value")
    if op not in OPS:
        problems.append(f"expectation {key!r} has unknown op {op!r} (one of {', '.join(OPS)})")
    elif op == "between" and not (isinstance(value, list) and len(value) == 2 and all(map(_is_number, value))):
        problems.append(f"expectation {key!r}: op between needs value [low, high], got {value!r}")
    elif op == "in" and not isinstance(value, list):
        problems.append(f"expectation {key!r}: op in needs a list value, got {value!r}")
    elif op in ("ge", "gt", "le", "lt") and value is not None and not _is_number(value):
        problems.append(f"expectation {key!r}: op {op} needs a number, got {type(value).__name__} {value!r}")
    elif op == "match" and not isinstance(value, str):
        problems.append(f"expectation {key!r}: op match needs a regular expression string, got {value!r}")
    if "warn" in raw and raw["warn"] is not None and op in ("ge", "gt", "le", "lt") and not _is_number(raw["warn"]):
        problems.append(f"expectation {key!r}: warn must be a number, got {raw['warn']!r}")
    bands = raw.get("bands")
    if bands is not None and not (isinstance(bands, Mapping) and all(_is_number(v) for v in bands.values())):
        problems.append(f"expectation {key!r}: bands must map band names to fractions, got {bands!r}")
    if str(raw.get("severity", "FAIL")).upper() not in ("FAIL", "WARN", "ERROR"):
        problems.append(f"expectation {key!r} has bad severity {raw.get('severity')!r} (FAIL, WARN or ERROR)")
    if "required" in raw and not isinstance(raw["required"], bool):
        problems.append(f"expectation {key!r}: required must be true or false, got {raw['required']!r}")
    for name in ("unit", "note"):
        if raw.get(name) is not None and not isinstance(raw[name], str):
            problems.append(f"expectation {key!r}: {name} must be a string, got {raw[name]!r}")
    return problems


def _parse_expectation(path: Path, key: str, raw: Any) -> Expectation:
    problems = expectation_problems(key, raw)
    if problems:
        raise ProfileError(f"{path}: {problems[0]}")
    op = raw.get("op", "ge")
    severity = str(raw.get("severity", "FAIL")).upper()
    return Expectation(key=key, source=str(raw["source"]), op=op, value=raw.get("value"),
                       unit=raw.get("unit"), warn=raw.get("warn"), bands=raw.get("bands"),
                       severity=severity, required=bool(raw.get("required", False)),
                       note=raw.get("note"), observe=bool(raw.get("observe", False)))


def _parse_known_issue(path: Path, raw: Any) -> KnownIssue:
    if not isinstance(raw, Mapping) or "check" not in raw or "reason" not in raw:
        raise ProfileError(f"{path}: known_issues entry needs check and reason: {raw!r}")
    expires = raw.get("expires")
    if isinstance(expires, str):
        expires = date.fromisoformat(expires)
    return KnownIssue(check=str(raw["check"]), reason=str(raw["reason"]), expires=expires,
                      hosts=tuple(raw.get("hosts", ())))


def find_profile_file(name: str, search: Sequence[Path]) -> Path:
    for folder in search_path(search):
        candidate = Path(folder) / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    looked = ", ".join(str(p) for p in search_path(search))
    raise ProfileError(f"unknown profile {name!r}{did_you_mean(name, available_profiles(search))}: "
                       f"`healthcheck profiles list` lists them (looked in {looked})")


def load_profile(name: str, search: Sequence[Path] = (), _seen: tuple[str, ...] = ()) -> Profile:
    """Load profile ``name`` (following ``inherits``) from the search path or the project's profiles."""
    if name in _seen:
        raise ProfileError(f"profile inheritance loop: {' -> '.join([*_seen, name])}")
    path = find_profile_file(name, search)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, Mapping):
        raise ProfileError(f"{path}: top level must be a mapping")
    unknown = _unknown_keys(raw, _PROFILE_KEYS)
    if unknown:
        raise ProfileError(f"{path}: unknown key {unknown[0]}")
    base = load_profile(raw["inherits"], search, (*_seen, name)) if raw.get("inherits") else None
    expectations = dict(base.expectations) if base else {}
    for key, item in (raw.get("expect") or {}).items():
        expectations[key] = _parse_expectation(path, key, item)
    settings = _merge(base.settings if base else {}, raw.get("settings") or {})
    issues = (base.known_issues if base else ()) + tuple(
        _parse_known_issue(path, item) for item in raw.get("known_issues") or ())
    listed = raw.get("observe") or []
    if not isinstance(listed, list) or not all(isinstance(x, str) and x for x in listed):
        raise ProfileError(f"{path}: observe must be a list of check ids or globs, got {listed!r}")
    observe = tuple(dict.fromkeys([*(base.observe if base else ()), *listed,
                                   *(k for k, e in expectations.items() if e.observe)]))
    return Profile(name=str(raw.get("name", name)), description=str(raw.get("description", "")),
                   expectations=expectations, settings=settings, known_issues=issues, path=str(path),
                   observe=observe)


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def available_profiles(search: Iterable[Path] = ()) -> list[str]:
    names: set[str] = set()
    for folder in search_path(search):
        names.update(p.stem for p in Path(folder).glob("*.yaml"))
    return sorted(names)


def validate_profile_file(path: Path) -> list[str]:
    """Every problem of one profile file (not just the first): unknown keys with a did-you-mean, wrong
    types, thresholds without a source, broken known_issues, an ``inherits`` that does not load."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as exc:
        return [f"cannot read: {exc}"]
    except yaml.YAMLError as exc:
        return [f"not valid YAML: {exc}"]
    if not isinstance(raw, Mapping):
        return ["top level must be a mapping (name, description, inherits, expect, settings, known_issues)"]
    inventory = sorted(str(k) for k in raw if k in _INVENTORY_KEYS)
    if inventory and not set(map(str, raw)) & _PROFILE_KEYS:
        return [f"this is an inventory (keys {', '.join(inventory)}), not a profile: check it with "
                f"`healthcheck inventory show -i {path}`; profiles are the files `healthcheck profiles list` names"]
    problems = [f"unknown key {k}" for k in _unknown_keys(raw, _PROFILE_KEYS)]
    for name in ("name", "description", "inherits"):
        if raw.get(name) is not None and not isinstance(raw[name], str):
            problems.append(f"{name} must be a string, got {raw[name]!r}")
    expect = raw.get("expect") or {}
    if not isinstance(expect, Mapping):
        problems.append(f"expect must be a mapping of check keys, got {type(expect).__name__}")
        expect = {}
    for key, item in expect.items():
        problems.extend(expectation_problems(str(key), item))
    if raw.get("settings") is not None and not isinstance(raw["settings"], Mapping):
        problems.append(f"settings must be a mapping, got {type(raw['settings']).__name__}")
    issues = raw.get("known_issues") or []
    if not isinstance(issues, list):
        problems.append("known_issues must be a list")
        issues = []
    for item in issues:
        try:
            _parse_known_issue(Path(path), item)
        except (ProfileError, ValueError, TypeError) as exc:
            problems.append(f"known_issues: {exc}")
    if isinstance(raw.get("inherits"), str) and not problems:
        try:
            load_profile(raw["inherits"], [Path(path).resolve().parent])
        except ProfileError as exc:
            problems.append(f"inherits: {exc}")
    return problems
