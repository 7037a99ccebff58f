"""Prometheus samples from the built-in probes' observations (JSON form), by probe name.

    healthcheck_gpu_temperature_celsius{gpu="3",host="gpu001"} 41.0
    healthcheck_gpu_ecc_errors_total{gpu="3",host="gpu001",type="uncorrectable"} 2.0
    healthcheck_nvlink_links_active{gpu="3",host="gpu001"} 17.0
    healthcheck_ib_port_up{host="gpu001",port="mlx5_0/1"} 1.0

Conversions to base units happen here (GB/s -> bytes/s, Gb/s -> bytes/s: promtool wants bytes, not bits); a missing or
non-numeric field gives no sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from healthcheck.reports.metrics import METRICS, Sample, extractor, number

METRICS.update({
    "healthcheck_gpus": ("gauge", "GPUs the node reports"),
    "healthcheck_gpu_temperature_celsius": ("gauge", "GPU core temperature"),
    "healthcheck_gpu_power_draw_watts": ("gauge", "GPU power draw"),
    "healthcheck_gpu_ecc_errors_total": ("counter", "Aggregate (lifetime) ECC errors, SRAM + DRAM, by type"),
    "healthcheck_gpu_row_remap_pending": ("gauge", "1 when a row remap is pending (GPU reset needed)"),
    "healthcheck_nvlink_links_active": ("gauge", "Number of active NVLink links of the GPU"),
    "healthcheck_nvlink_link_speed_min_bytes_per_second": ("gauge", "Slowest active NVLink link of the GPU"),
    "healthcheck_nvlink_errors_total": ("counter", "NVLink error counters by type, summed over the GPU's links"),
    "healthcheck_ib_port_up": ("gauge", "1 when the InfiniBand/RoCE port is ACTIVE"),
    "healthcheck_ib_port_rate_bytes_per_second": ("gauge", "InfiniBand/RoCE port rate (signalling rate / 8)"),
    "healthcheck_ib_port_errors_total": ("counter", "Non-zero InfiniBand port error counters"),
    "healthcheck_nccl_busbw_bytes_per_second": ("gauge", "Peak nccl-tests bus bandwidth per node and test"),
    "healthcheck_hpl_flops": ("gauge", "Best HPL result per node in FLOP/s"),
    "healthcheck_pair_bandwidth_bytes_per_second": ("gauge", "Bandwidth measured between two nodes"),
    "healthcheck_pair_latency_seconds": ("gauge", "Latency measured between two nodes"),
})

_IB_ERRORS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
              "port_rcv_remote_physical_errors", "port_xmit_discards", "local_link_integrity_errors",
              "excessive_buffer_overrun_errors")


def _records(obs: Any, key: str) -> list[Mapping[str, Any]]:
    value = obs.get(key) if isinstance(obs, Mapping) else None
    return [r for r in value if isinstance(r, Mapping)] if isinstance(value, list) else []


def _sample(name: str, labels: Mapping[str, str], value: Any, scale: float = 1.0) -> Iterable[Sample]:
    v = number(value) if not isinstance(value, bool) else float(value)
    if v is not None:
        yield Sample(name, dict(labels), v * scale)


def _gpu(host: str, g: Mapping[str, Any]) -> Iterable[Sample]:
    """Five series per GPU: the key values for trending (the findings carry the rest)."""
    labels = {"host": host, "gpu": str(g.get("index"))}
    yield from _sample("healthcheck_gpu_temperature_celsius", labels, g.get("temp_c"))
    yield from _sample("healthcheck_gpu_power_draw_watts", labels, g.get("power_draw_w"))
    counts = g.get("ecc_aggregate")
    if isinstance(counts, Mapping):
        for kind in ("correctable", "uncorrectable"):
            values = [v for k, v in counts.items() if k.endswith(f"_{kind}") and isinstance(v, int)]
            if values:
                yield Sample("healthcheck_gpu_ecc_errors_total", {**labels, "type": kind}, float(sum(values)))
    remap = g.get("remap")
    if isinstance(remap, Mapping):
        yield from _sample("healthcheck_gpu_row_remap_pending", labels, remap.get("pending"))


@extractor("gpu")
def gpu_samples(host: str, obs: Any) -> Iterable[Sample]:
    if isinstance(obs, Mapping):
        yield from _sample("healthcheck_gpus", {"host": host}, obs.get("count"))
    for g in _records(obs, "gpus"):
        yield from _gpu(host, g)


@extractor("nvlink")
def nvlink_samples(host: str, obs: Any) -> Iterable[Sample]:
    """Per GPU, not per link: 18 links x 3 counters x 8 GPUs x 1000 hosts would be 432k series.
    The findings name the bad link; these series are for trending and alerting per GPU."""
    for g in _records(obs, "gpus"):
        links = _records(g, "links")
        if not links:
            continue
        labels = {"host": host, "gpu": str(g.get("index"))}
        yield Sample("healthcheck_nvlink_links_active", labels, float(sum(bool(x.get("active")) for x in links)))
        speeds = [v for v in (number(x.get("speed_gbps")) for x in links if x.get("active")) if v is not None]
        if speeds:
            yield Sample("healthcheck_nvlink_link_speed_min_bytes_per_second", labels, min(speeds) * 1e9)
    totals: dict[tuple[str, str], float] = {}
    for c in _records(obs, "counters"):
        for kind in ("replay", "recovery", "crc"):
            value = number(c.get(kind))
            if value is not None:
                key = (str(c.get("gpu")), kind)
                totals[key] = totals.get(key, 0.0) + value
    for (gpu, kind), value in sorted(totals.items()):
        yield Sample("healthcheck_nvlink_errors_total", {"host": host, "gpu": gpu, "type": kind}, value)


@extractor("infiniband")
def infiniband_samples(host: str, obs: Any) -> Iterable[Sample]:
    for dev in _records(obs, "devices"):
        for port in _records(dev, "ports"):
            labels = {"host": host, "port": f"{dev.get('name')}/{port.get('port')}"}
            if port.get("state"):
                yield Sample("healthcheck_ib_port_up", labels, float(port.get("state") == "ACTIVE"))
            yield from _sample("healthcheck_ib_port_rate_bytes_per_second", labels, port.get("rate_gbps"), 1e9 / 8)
            counters = {**(port.get("counters") or {}), **(port.get("hw_counters") or {})}
            for name in _IB_ERRORS:  # non-zero only: 8 counters x 12 ports x 1000 hosts = 96k series
                if number(counters.get(name)):
                    yield from _sample("healthcheck_ib_port_errors_total", {**labels, "counter": name},
                                       counters.get(name))
