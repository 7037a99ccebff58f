"""The benchmark registry: nccl-tests, HPL/HPCC, IMB and OSU, each a ``BenchmarkSpec`` value.

    from healthcheck import benchmarks
    spec = benchmarks.get("nccl")
    spec.program(job, profile, options)      # Program(argv=("all_reduce_perf", "-b", ...), env={...})
    spec.parse(text)                         # NcclTestResult (pure; ParseError on garbage)
    spec.evaluate(job, result, ctx)          # [Finding, ...] for the hosts in the job

A benchmark module calls ``register(BenchmarkSpec(...))`` at import; a duplicate name raises.
Planning (``benchmarks.plan``), launching (``benchmarks.launch``), execution and replay
(``healthcheck.run.benchmarks``) and pair attribution (``benchmarks.attribution``) are shared by all of them.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from healthcheck.core.model import Finding, Host
from healthcheck.core.profiles import Profile
from healthcheck.core.spec import ParseError, parse_guarded
from healthcheck.core.suggest import did_you_mean


class RegistryError(KeyError):
    """Duplicate or unknown benchmark name."""


@dataclass(frozen=True)
class Program:
    """What one job runs on every rank, before a launcher (mpirun/srun) wraps it.

    ``input_files`` are written into the job's working directory on the launcher host before the
    launch (HPL.dat, hpccinf.txt); ``output_files`` are printed to stdout after it (hpccoutf.txt),
    so every result ends up in the job's raw output.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    input_files: Mapping[str, str] = field(default_factory=dict)
    output_files: tuple[str, ...] = ()


@dataclass(frozen=True)
class BenchContext:
    """What a benchmark evaluator may know besides the parsed output of its job."""

    profile: Profile
    hosts: Mapping[str, Host]
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BenchmarkSpec:
    """One benchmark tool.

    ``tests(profile, options)`` names the tests one plan runs (``all_reduce_perf``, ``hpl``,
    ``PingPong``); ``shapes`` maps a plan (``quick``, ``acceptance``) to the job shapes it runs
    (``node``, ``pair``, ``rail``, ``cluster``); ``ranks_per_host(profile, shape)`` is the MPI
    ranks per node. ``program`` is pure and builds argv/env/input files for one job. ``parse``
    is pure (text -> result, ``ParseError`` on output it cannot understand); ``evaluate`` is pure
    and checks correctness first (#wrong, residual, validation), then performance. ``fleet``
    compares per-node results across hosts (None when the tool has no fleet check).
    """

    name: str
    description: str
    tests: Callable[[Profile, Mapping[str, Any]], tuple[str, ...]]
    shapes: Mapping[str, tuple[str, ...]]
    ranks_per_host: Callable[..., int]  # (profile, shape, options) -> ranks per node
    program: Callable[[Any, Profile, Mapping[str, Any]], Program]
    parse: Callable[[str], Any]
    evaluate: Callable[[Any, Any, BenchContext], list[Finding]]
    metric: Callable[[Any], float | None] = lambda result: None
    # what the reports draw of one job, from its result in JSON form ({"busbw": [[size, GB/s], ...]}), kept
    # in the job's record so that no report parses raw output; empty when the tool has nothing to draw
    series: Callable[[Any], Mapping[str, Any]] = lambda result: {}
    fleet: Callable[[Sequence[tuple[Any, Any]], BenchContext], list[Finding]] | None = None
    # "direct": the program runs as is on the job's (single) node, no mpirun/srun (sdc); None: the launcher
    launcher: str | None = None


# A decimal or scientific number as benchmarks print it (1e+00, 476.53, .5, -nan handled by callers).
NUMBER_RE = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"



def finite(token: str, where: str = "") -> float:
    """``float(token)`` for a number a tool printed; ``nan``/``inf`` (or 1e309) is no measurement:
    ``ParseError`` naming the token, so the job is ERROR, never a FAIL on "nan GB/s"."""
    value = float(token)
    if not math.isfinite(value):
        raise ParseError(f"non-finite number {token!r}{f' in {where}' if where else ''}", where or token)
    return value


_SPECS: dict[str, BenchmarkSpec] = {}

# Built-in benchmark modules, in the order they run.
BUILTIN = tuple(f"healthcheck.benchmarks.{name}" for name in ("nccl", "hpl", "imb", "osu", "sdc", "gpuperf",
                                                                  "nvbandwidth", "nvloom", "mndiag"))


def register(spec: BenchmarkSpec) -> BenchmarkSpec:
    """Register ``spec``; its parser is registered guarded (``spec.parse_guarded``: only ParseError)."""
    if spec.name in _SPECS:
        raise RegistryError(f"benchmark {spec.name!r} registered twice")
    spec = dataclasses.replace(spec, parse=parse_guarded(spec.parse))
    _SPECS[spec.name] = spec
    return spec


def _load_builtins() -> None:
    for module in BUILTIN:
        importlib.import_module(module)


def all_benchmarks() -> list[BenchmarkSpec]:
    _load_builtins()
    return list(_SPECS.values())


def get(name: str) -> BenchmarkSpec:
    _load_builtins()
    try:
        return _SPECS[name]
    except KeyError:
        raise RegistryError(f"unknown benchmark {name!r}{did_you_mean(name, _SPECS)} "
                            f"(known: {', '.join(sorted(_SPECS))})") from None


def select(names: Sequence[str]) -> list[BenchmarkSpec]:
    """Benchmarks by name, in the order given; unknown names raise."""
    return [get(n) for n in names]


def bench_setting(profile: Profile, options: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    """A benchmark setting: ``options[dotted]`` (run options win), else profile ``settings.benchmarks``."""
    if dotted in options:
        return options[dotted]
    return profile.setting(f"benchmarks.{dotted}", default)
