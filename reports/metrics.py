"""Prometheus samples from observations: one small extractor per probe name.

    @extractor("gpu")
    def gpu_samples(host, obs): yield Sample("healthcheck_gpu_temperature_celsius", {...}, 41.0)

Every metric name used anywhere must be declared in ``METRICS`` (type and help text). Extractors
read observations defensively: a missing or non-numeric field yields no sample.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


METRICS: dict[str, tuple[str, str]] = {
    "healthcheck_run_duration_seconds": ("gauge", "How long the sweep took"),
    "healthcheck_run_info": ("gauge", "The run (id, version, mode) as labels"),
    "healthcheck_hosts": ("gauge", "Number of hosts per verdict"),
    "healthcheck_host_verdict": ("gauge", "Always 1: the host's verdict is the label"),
    "healthcheck_host_findings": ("gauge", "Findings of the host per status"),
    "healthcheck_check_status": ("gauge", "Components of the check in its worst status (the label)"),
}

Extractor = Callable[[str, Any], Iterable[Sample]]
_EXTRACTORS: dict[str, Extractor] = {}


def extractor(probe: str) -> Callable[[Extractor], Extractor]:
    def deco(fn: Extractor) -> Extractor:
        if probe in _EXTRACTORS:
            raise KeyError(f"metrics extractor for {probe!r} registered twice")
        _EXTRACTORS[probe] = fn
        return fn
    return deco


def number(value: Any) -> float | None:
    """A finite float from a JSON value, or None (strings like "N/A" give None)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        out = float(value)
    except ValueError:
        return None
    return out if out == out and abs(out) != float("inf") else None


def extracted_probes() -> frozenset[str]:
    """The probes whose observations become per-host series (what a detailed exposition reads)."""
    return frozenset(_EXTRACTORS)


def observation_samples(host: str, observations: Mapping[str, Any]) -> list[Sample]:
    out: list[Sample] = []
    for probe in sorted(observations):
        fn = _EXTRACTORS.get(probe)
        if fn is not None and observations[probe] is not None:
            out.extend(fn(host, observations[probe]))
    return out
