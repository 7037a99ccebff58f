"""Shared by the property tests (``tests/unit/test_fuzz_parsers.py``) and ``bench/fuzz.py``: seeds
(real layouts) for every registered parser, mutations of them, and the contract checks.

Seeds are the sample bundle's outputs, our fixtures (``tests/fixtures``) and, when present, the
corpus (``../shared/corpus``), each under the command id or benchmark it belongs to. A mutation
keeps most of a real layout and breaks one thing: a cut, a number turned into ``nan``/``inf``/huge (up to
a 5,000-digit run, which ``int()`` refuses),
a line deleted or repeated, a control byte, a splice of two seeds.

The contract (``check_probe`` / ``check_benchmark``): ``parse`` raises nothing but ``ParseError``;
``evaluate`` raises nothing; no finding grades a non-finite value other than ERROR; observations
and findings serialise without bare NaN/Infinity once made JSON-safe.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import Any

from healthcheck import benchmarks, probes
from healthcheck.benchmarks import BenchContext
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import CommandResult, Finding, Host, Status, json_safe
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.run.stages import probe_command_ids
from healthcheck.store.jsoncodec import to_jsonable
from tests.conftest import CORPUS, FIXTURES, ROOT  # CORPUS honours HEALTHCHECK_CORPUS

SAMPLE = ROOT / "inventories" / "samples" / "h100-4node" / "raw"
PROFILE = "h100-sxm5-8x"

# fixture/corpus folder + filename prefix -> command id (probe) or benchmark name
_SOURCES: tuple[tuple[str, str, str], ...] = (
    ("nvidia-smi-xml", "", "nvidia-smi-q-x"), ("nvidia-smi-q", "", "nvidia-smi-q"),
    ("nvidia-smi-l", "", "nvidia-smi-l"), ("nvidia-smi-errors", "", "nvidia-smi-q-x"),
    ("topo", "", "nvidia-smi-topo"), ("nvlink", "h100-8gpu-status", "nvidia-smi-nvlink-s"),
    ("nvlink", "h100-8gpu-errors", "nvidia-smi-nvlink-e"), ("xid", "", "kernel-log"),
    ("ib", "sysfs", "ib-sysfs"), ("ib", "ibstat", "ibstat"), ("dcgmi", "diag", "dcgmi-diag"),
    ("dcgmi", "health", "dcgmi-health"), ("dcgmi", "discovery", "dcgmi-discovery"),
    ("dcgmi-dmon", "", "dcgmi-dmon"), ("system", "meminfo", "meminfo"), ("system", "cpu-sysfs", "cpu-sysfs"),
    ("system", "df-dev-shm", "dev-shm"), ("system", "edac", "edac-sysfs"), ("system", "pcie-aer", "pcie-aer"),
    ("system", "proc-mounts", "proc-mounts"), ("system", "mount-probe", "mount-probe"),
    ("system", "systemctl", "systemd-units"), ("system", "nccl-libs", "nccl-libs"),
    ("nccl-tests", "", "bench:nccl"), ("imb", "", "bench:imb"), ("hpl", "", "bench:hpl"), ("osu", "", "bench:osu"),
    ("sdc", "", "bench:sdc"), ("gpuperf", "", "bench:gpuperf"), ("nvbandwidth", "", "bench:nvbandwidth"),
    ("nvloom", "", "bench:nvloom"), ("mndiag", "", "bench:mndiag"),
    ("nvidia-smi", "nvidia-smi-q-", "nvidia-smi-q"), ("imex", "ctl-N", "imex-ctl-nodes"),
    ("imex", "nodes_config", "imex-nodes-config"),
)

_NOW = datetime(2026, 11, 21, 4, 0, tzinfo=timezone.utc)  # the sample bundle's collection time
BAD_NUMBERS = ("nan", "-nan", "NaN", "inf", "-inf", "Infinity", "1e309", "-1", "99999999999999999999999",
               "N/A", "[Not Supported]", "０", "", "7" * 5000)  # 5,000 digits: more than int() converts
GARBAGE = ("\x00", "\xff", "\x1b[2J", "\x1b]0;x\x07", "\u202e", "<", "&", "]]>", "\r", "{", "[", "\t", "%s",
           "((((((((((", "x" * 5000)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _read(path: Path) -> str:
    text = path.read_bytes().decode("utf-8", errors="replace")
    if path.is_relative_to(CORPUS) and text.startswith("#") and "\n" in text:
        text = text.split("\n", 1)[1]  # the corpus's "# source:" header
    return text


@cache
def seeds() -> dict[str, tuple[str, ...]]:
    """Seed texts by command id (``bench:<name>`` for benchmarks)."""
    found: dict[str, list[str]] = {}
    for host in sorted(SAMPLE.iterdir()):
        for out in sorted(host.glob("*.out")):
            found.setdefault(out.stem, []).append(_read(out))
    for base in (FIXTURES, CORPUS):
        for folder, prefix, key in _SOURCES:
            for path in sorted((base / folder).rglob(f"{prefix}*")) if (base / folder).is_dir() else []:
                if path.is_file() and path.stat().st_size < 2_000_000:
                    found.setdefault(key, []).append(_read(path))
    return {k: tuple(v) for k, v in found.items()}


def mutate(rng: random.Random, text: str, other: str) -> str:
    """One or a few mutations of a real layout."""
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        kind = rng.randrange(9)
        lines = text.splitlines(keepends=True)
        if kind == 0 and text:  # cut anywhere
            text = text[: rng.randrange(len(text))]
        elif kind in (1, 2):  # a number becomes nan/inf/huge/N/A
            spots = list(_NUMBER.finditer(text))
            if spots:
                m = rng.choice(spots)
                text = text[: m.start()] + rng.choice(BAD_NUMBERS) + text[m.end():]
        elif kind == 3 and lines:  # delete a line
            del lines[rng.randrange(len(lines))]
            text = "".join(lines)
        elif kind == 4 and lines:  # repeat a line
            i = rng.randrange(len(lines))
            lines[i:i] = [lines[i]] * rng.choice((2, 10, 300))
            text = "".join(lines)
        elif kind == 5:  # garbage inserted
            i = rng.randrange(len(text) + 1)
            text = text[:i] + rng.choice(GARBAGE) + text[i:]
        elif kind == 6 and lines:  # lines shuffled locally
            i = rng.randrange(len(lines))
            chunk = lines[i:i + 5]
            rng.shuffle(chunk)
            lines[i:i + 5] = chunk
            text = "".join(lines)
        elif kind == 7:  # splice two seeds
            text = text[: rng.randrange(len(text) + 1)] + other[rng.randrange(len(other) + 1):]
        elif kind == 8 and text:  # a byte flipped
            i = rng.randrange(len(text))
            text = text[:i] + chr(rng.randrange(1, 0x3000)) + text[i + 1:]
    return text


def _nonfinite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _check_findings(findings: list[Finding]) -> None:
    for f in findings:
        assert isinstance(f, Finding), f
        if _nonfinite(f.value) or _nonfinite(f.expected):
            assert f.status is Status.ERROR, f"non-finite value graded {f.status.value}: {f}"
    json.dumps(json_safe([f.to_json() for f in findings]), allow_nan=False)


@cache
def _profile() -> Any:
    return load_profile(PROFILE, [])


def probe_ids() -> list[tuple[str, str]]:
    """(probe, command id) for every registered probe command that has seeds."""
    have = seeds()
    return [(p.name, cid) for p in probes.all_probes() for cid in probe_command_ids(p, {"kernel_log_window_h": 24})
            if cid in have]


def check_probe(probe_name: str, cid: str, text: str, alone: bool) -> str:
    """Parse ``text`` as ``cid`` (alone or beside the probe's healthy outputs) and evaluate it.
    Returns "parse-error" or "parsed"; any contract breach raises AssertionError or the exception."""
    probe = probes.get(probe_name)
    healthy = {c: seeds()[c][0] for c in probe_command_ids(probe, {}) if c in seeds() and not alone}
    outputs = {c: CommandResult("fuzz", c, t.encode("utf-8", "surrogatepass"), b"", 0)
               for c, t in {**healthy, cid: text}.items()}
    try:
        observations = probe.parse(outputs)
    except ParseError:
        return "parse-error"
    ctx = EvalContext(host=Host("fuzz", profile=PROFILE), profile=_profile(), previous={},
                      options={"kernel_log_window_h": 24.0}, now=_NOW)
    _check_findings(list(probe.evaluate(observations, ctx)))
    json.dumps(json_safe(to_jsonable(observations)), allow_nan=False)
    return "parsed"


def bench_job(name: str, text: str) -> Job:
    test = {"nccl": "all_reduce_perf", "hpl": "xhpl", "imb": "PingPong", "osu": "osu_latency", "sdc": "sdc",
            "gpuperf": "gpuperf", "nvbandwidth": "nvbandwidth", "nvloom": "bisect_device_to_device_write_sm",
            "mndiag": "mnubergemm"}[name]
    shape = "node" if name in ("nccl", "hpl", "sdc", "gpuperf", "nvbandwidth") else \
        "cluster" if name in ("nvloom", "mndiag") else "pair"
    hosts = ("fuzz1",) if shape == "node" else ("r07t01", "r07t02") if shape == "cluster" else ("fuzz1", "fuzz2")
    return Job(job_id=f"{name}-fuzz", benchmark=name, test=test, shape=shape, hosts=hosts, ranks_per_host=8)


def check_benchmark(name: str, text: str) -> str:
    spec = benchmarks.get(name)
    try:
        parsed = spec.parse(text)
    except ParseError:
        return "parse-error"
    job = bench_job(name, text)
    ctx = BenchContext(_profile(), {h: Host(h, profile=PROFILE) for h in job.hosts}, {})
    _check_findings(list(spec.evaluate(job, parsed, ctx)))
    metric = spec.metric(parsed)
    assert metric is None or isinstance(metric, int | float)
    json.dumps(json_safe(to_jsonable(parsed)), allow_nan=False)
    return "parsed"


Check = Callable[[str], str]


def targets() -> list[tuple[str, Check, tuple[str, ...]]]:
    """(label, check(text), seeds) for every registered parser: probes per command id (alone, and
    beside the probe's healthy outputs), then benchmarks."""
    have = seeds()
    out: list[tuple[str, Check, tuple[str, ...]]] = []
    for probe_name, cid in probe_ids():
        for alone in (True, False):
            out.append((f"probe:{probe_name}:{cid}:{'alone' if alone else 'beside'}",
                        lambda t, p=probe_name, c=cid, a=alone: check_probe(p, c, t, a), have[cid]))
    for spec in benchmarks.all_benchmarks():
        if f"bench:{spec.name}" in have:
            out.append((f"bench:{spec.name}", lambda t, n=spec.name: check_benchmark(n, t), have[f"bench:{spec.name}"]))
    return out


def parsers() -> dict[str, list[tuple[str, Check, tuple[str, ...]]]]:
    """``targets()`` grouped by registered parser (``probe:gpu``, ``bench:imb``)."""
    grouped: dict[str, list[tuple[str, Check, tuple[str, ...]]]] = {}
    for label, check, texts in targets():
        grouped.setdefault(":".join(label.split(":")[:2]), []).append((label, check, texts))
    return grouped


def counts_by_parser(labels: Mapping[str, int]) -> dict[str, int]:
    merged: dict[str, int] = {}
    for label, n in labels.items():
        key = ":".join(label.split(":")[:2])
        merged[key] = merged.get(key, 0) + n
    return merged
