"""The built-in observation panels: GPU table, topology matrix, NVLink, InfiniBand, fabric, system.

    panels.host_panels(host.observations)   # -> [Panel("GPUs (8)", ...), Panel("topology", ...)]

Field names follow the probes' observation dataclasses (``probes/gpu_model.py``,
``probes/topology.py``, ``probes/nvlink.py``, ``probes/ib_parse.py``, ``probes/fabric.py``) in their
JSON form, but every renderer tolerates missing fields, so an older results.json still renders.
A cell class ``bad`` marks a value the operator should look at (downtrained link, pending remap).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping
from typing import Any

from healthcheck.reports.metrics import number as _num
from healthcheck.reports.panels import Panel, Table, _records, cell, panel, record_table, scalars_table

TABLE = "panels/table.html.j2"
_LINK_CLASS = (("X", "t-self"), ("NV", "t-nv"), ("PIX", "t-pix"), ("PXB", "t-pxb"), ("PHB", "t-phb"),
               ("NODE", "t-node"), ("SYS", "t-sys"))
IB_ERROR_COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
                     "port_rcv_remote_physical_errors", "port_xmit_discards", "local_link_integrity_errors",
                     "excessive_buffer_overrun_errors", "port_rcv_constraint_errors")


def _get(rec: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(rec, Mapping):
            return None
        rec = rec.get(key)
    return rec



def _pair(a: Any, b: Any, unit: str = "", sep: str = " / ") -> str:
    parts = [str(v) for v in (a, b) if v is not None]
    return (sep.join(parts) + (f" {unit}" if unit else "")) if parts else ""


def _ecc(counts: Any) -> tuple[str, bool]:
    """``corr / uncorr`` over SRAM+DRAM and whether any uncorrectable error is counted."""
    if not isinstance(counts, Mapping):
        return "", False
    corr = [v for k, v in counts.items() if k.endswith("_correctable") and isinstance(v, int)]
    unc = [v for k, v in counts.items() if k.endswith("_uncorrectable") and isinstance(v, int)]
    if not corr and not unc:
        return "", False
    return f"{sum(corr)} / {sum(unc)}", sum(unc) > 0


def _pcie(g: Mapping[str, Any]) -> tuple[str, bool]:
    """``Gen5 x16 (max Gen5 x16)`` and whether the link is downtrained in width."""
    w_cur, w_max = g.get("pcie_width_current"), g.get("pcie_width_max")
    if g.get("pcie_gen_current") is None and w_cur is None:
        return "", False
    text = f"Gen{g.get('pcie_gen_current') or '?'} x{w_cur or '?'}"
    if g.get("pcie_gen_max") is not None or w_max is not None:
        text += f" (max Gen{g.get('pcie_gen_max') or '?'} x{w_max or '?'})"
    return text, isinstance(w_cur, int) and isinstance(w_max, int) and w_cur < w_max


def _remap(g: Mapping[str, Any]) -> tuple[str, bool]:
    remap = g.get("remap")
    if not isinstance(remap, Mapping):
        return "", False
    flags = [name.upper() for name in ("pending", "failure") if remap.get(name)]
    text = " ".join([_pair(remap.get("correctable"), remap.get("uncorrectable")), *flags]).strip()
    return text, bool(flags or remap.get("uncorrectable"))


def gpu_row(g: Mapping[str, Any]) -> list[tuple[str, Any, bool]]:
    """One GPU as (header, cell, needs attention) triples."""
    temp, slowdown = _num(g.get("temp_c")), _num(g.get("slowdown_c"))
    events = [str(e) for e in g.get("clock_events") or () if e]
    retired = _pair(g.get("retired_sbe"), g.get("retired_dbe"))
    bus = g.get("bus_id")
    return [("GPU", g.get("index"), False), ("name", g.get("name"), False),
            ("bus id", bus.removeprefix("00000000:") if isinstance(bus, str) else bus, False),
            ("memory (MiB)", g.get("memory_total_mib"), False),
            ("temp (°C)", temp, temp is not None and slowdown is not None and temp >= slowdown),
            ("HBM temp (°C)", _num(g.get("memory_temp_c")), False),
            ("power", _pair(g.get("power_draw_w"), g.get("power_limit_w"), "W"), False),
            ("PCIe", *_pcie(g)),
            ("ECC volatile corr / unc", *_ecc(g.get("ecc_volatile"))),
            ("ECC aggregate corr / unc", *_ecc(g.get("ecc_aggregate"))),
            ("row remap corr / unc", *_remap(g)),
            ("retired pages sbe / dbe", retired + (" PENDING" if g.get("retired_pending") else ""),
             bool(g.get("retired_pending"))),
            ("clock events", ", ".join(events), any(e.startswith(("hw_", "sw_thermal")) for e in events)),
            ("fabric", g.get("fabric_state"), g.get("fabric_state") not in (None, "", "Completed", "N/A")),
            ("VBIOS", g.get("vbios"), False),
            ("unreadable", ", ".join(str(u) for u in g.get("unreadable") or ()), bool(g.get("unreadable")))]


@panel("gpu")
def gpu_panel(obs: Any) -> Panel | None:
    gpus = _records(obs, "gpus")
    if not gpus:
        table = scalars_table(obs) if isinstance(obs, Mapping) else None
        return Panel("GPU", TABLE, table) if table else None
    triples = [gpu_row(g) for g in gpus]
    names = {g.get("name") for g in gpus}
    keep = [i for i in range(len(triples[0])) if i == 0 or any(t[i][1] not in ("", None) for t in triples)]
    if len(names) == 1 and len(gpus) > 1 and 1 in keep:
        keep.remove(1)  # one model: named in the title instead of on every row
    table = Table(columns=[triples[0][i][0] for i in keep],
                  rows=[[cell(t[i][1]) for i in keep] for t in triples],
                  classes=[["bad" if t[i][2] else "" for i in keep] for t in triples])
    notes = [f"{k.replace('_', ' ')} {obs[k]}" for k in ("driver_version", "cuda_version")
             if isinstance(obs, Mapping) and obs.get(k)]
    model = f" {next(iter(names))}" if len(names) == 1 and None not in names else ""
    return Panel(f"GPUs ({len(gpus)}){model}", TABLE, table, note=", ".join(notes))


def link_class(value: Any) -> str:
    """CSS class of a ``nvidia-smi topo -m`` cell: NV# green through SYS red."""
    return _link_class(value if type(value) is str else str(value))


@functools.lru_cache(maxsize=512)  # a fleet's matrices repeat a handful of cell texts (X, NV18, PIX, SYS...)
def _link_class(cell_text: str) -> str:
    text = cell_text.strip().upper()
    return next((cls for prefix, cls in _LINK_CLASS if text.startswith(prefix)), "")


def matrix_table(obs: Mapping[str, Any]) -> Table | None:
    """``TopologyObservation`` JSON (columns + rows of device/links/affinity) as a colored matrix."""
    columns = [str(c) for c in obs.get("columns") or []]
    rows = _records(obs, "rows")
    if not columns or not rows:
        return None
    extra = [k for k in ("cpu_affinity", "numa_affinity", "gpu_numa_id") if any(r.get(k) for r in rows)]
    names = obs.get("nic_names") if isinstance(obs.get("nic_names"), Mapping) else {}
    out_rows, classes = [], []
    for r in rows:
        links = list(r.get("links") or [])
        out_rows.append([r.get("device", ""), *links, *(r.get(k) or "" for k in extra)])
        classes.append(["", *(link_class(v) for v in links), *("" for _ in extra)])
    header = [""] + [f"{c} ({names[c]})" if c in names else c for c in columns]
    return Table(columns=header + [k.replace("_", " ") for k in extra], rows=out_rows, classes=classes)


@panel("topology")
def topology_panel(obs: Any) -> Panel | None:
    if not isinstance(obs, Mapping):
        return None
    table = matrix_table(obs)
    if table is None:
        fallback = scalars_table(obs)
        return Panel("topology", TABLE, fallback) if fallback else None
    kind = "P2P status matrix" if obs.get("kind") == "p2p" else "nvidia-smi topo -m"
    return Panel(f"topology ({kind})", "panels/matrix.html.j2", table)


def _link_counters(obs: Any) -> dict[Any, dict[str, int]]:
    """Error counters summed per GPU over its links."""
    out: dict[Any, dict[str, int]] = {}
    for c in _records(obs, "counters"):
        sums = out.setdefault(c.get("gpu"), {})
        for key in ("replay", "recovery", "crc"):
            if isinstance(c.get(key), int):
                sums[key] = sums.get(key, 0) + c[key]
    return out


@panel("nvlink")
def nvlink_panel(obs: Any) -> Panel | None:
    gpus = _records(obs, "gpus")
    if not gpus:
        return None
    counters = _link_counters(obs)
    rows, classes = [], []
    for g in gpus:
        links = _records(g, "links")
        down = [str(link.get("link")) for link in links if not link.get("active")]
        speeds = sorted({s for link in links if (s := _num(link.get("speed_gbps"))) is not None})
        speed = " – ".join(f"{v:g}" for v in dict.fromkeys(speeds[:1] + speeds[-1:]))
        sums = counters.get(g.get("index"), {})
        totals = [sums.get(k, "") for k in ("replay", "recovery", "crc")]
        rows.append([g.get("index"), g.get("state", ""), f"{len(links) - len(down)} / {len(links)}",
                     ", ".join(down), speed, *totals])
        flags = [False, g.get("state") == "all_inactive", bool(down), bool(down), len(speeds) > 1,
                 *(bool(t) for t in totals)]
        classes.append(["bad" if f else "" for f in flags])
    table = Table(columns=["GPU", "state", "links up", "inactive links", "speed (GB/s)", "replay",
                           "recovery", "CRC"], rows=rows, classes=classes)
    return Panel(f"NVLink ({len(gpus)} GPUs)", TABLE, table)


@panel("infiniband")
def infiniband_panel(obs: Any) -> Panel | None:
    """One row per port; state, physical state, counters and a rate below the host's usual one in red."""
    ports = [(dev, port) for dev in _records(obs, "devices") for port in _records(dev, "ports")]
    usual = _usual_rates(port for _, port in ports)
    rows, classes = [], []
    for dev, port in ports:
        rate = port.get("rate_gbps")
        slow = (isinstance(rate, int | float) and not isinstance(rate, bool)
                and rate < usual.get(port.get("link_layer"), 0))
        counters = {**(port.get("counters") or {}), **(port.get("hw_counters") or {})}
        errors = {k: v for k, v in counters.items() if k in IB_ERROR_COUNTERS and v}
        rows.append([f"{dev.get('name', '?')}/{port.get('port', '?')}", port.get("state") or "",
                     port.get("phys_state") or "", port.get("rate_text") or cell(port.get("rate_gbps")),
                     port.get("link_layer") or "", dev.get("hca_type") or "", dev.get("fw_ver") or "",
                     ", ".join(f"{k}={v}" for k, v in sorted(errors.items()))])
        classes.append(["", "" if port.get("state") in (None, "ACTIVE") else "bad",
                        "" if port.get("phys_state") in (None, "LinkUp") else "bad", "bad" if slow else "",
                        "", "", "",
                        "bad" if errors else ""])
    if not rows:
        return None
    table = Table(columns=["port", "state", "physical", "rate", "link layer", "HCA", "firmware",
                           "error counters (non-zero)"], rows=rows, classes=classes)
    note = str(_get(obs, "ibstat_error", "message") or "")
    return Panel(f"InfiniBand / RoCE ({len(rows)} ports)", TABLE, table, note=note)


def _usual_rates(ports: Any) -> dict[Any, float]:
    """The most common rate (Gb/s) of the ACTIVE ports per link layer: the host's intended port speed."""
    seen: dict[Any, Counter[float]] = {}
    for port in ports:
        rate = port.get("rate_gbps")
        if port.get("state") == "ACTIVE" and isinstance(rate, int | float) and not isinstance(rate, bool):
            seen.setdefault(port.get("link_layer"), Counter())[float(rate)] += 1
    return {layer: counts.most_common(1)[0][0] for layer, counts in seen.items()}


_TRAFFIC = ("_data", "_packets", "_bytes", "_requests", "lifespan", "dct_connect")  # volume, not faults
FABRIC_FAMILIES = {"ib": "IB port", "ib_hw": "mlx5 hw", "eth": "ethtool"}


def is_traffic(counter: str) -> bool:
    """A traffic volume counter (bytes, packets, requests), not a fault or congestion counter."""
    return any(part in counter for part in _TRAFFIC)


@panel("rates")
def fabric_counters_panel(obs: Any) -> Panel | None:
    """The rates probe's fabric counters per port (``probes/rates.py`` ``CounterSnapshot``): every non-zero
    fault or congestion counter, with its average per hour since boot when the node's uptime is known.
    Traffic volume counters are left out; thresholds and outliers are in the findings."""
    counters = _get(obs, "counters")
    uptime = _num(_get(obs, "uptime_s"))
    hours = uptime / 3600 if uptime and uptime > 0 else None
    rows = []
    for family, label in FABRIC_FAMILIES.items():
        ports = _get(counters, family)
        for port, values in sorted(ports.items()) if isinstance(ports, Mapping) else ():
            for name, value in sorted(values.items()) if isinstance(values, Mapping) else ():
                if type(value) is int and value > 0 and not is_traffic(name):
                    rows.append([str(port), label, name, value, "" if hours is None else f"{value / hours:,.1f}"])
    if not rows:
        return None
    table = Table(columns=["port", "source", "counter", "since boot", "per hour since boot"], rows=rows[:200])
    more = f"; {len(rows) - 200} more in results.json" if len(rows) > 200 else ""
    return Panel(f"fabric counters ({len(rows)} non-zero)", TABLE, table,
                 note=f"uptime {uptime / 3600:,.1f} h{more}" if hours else f"uptime unknown{more}")


@panel("fabric")
def fabric_panel(obs: Any) -> Panel | None:
    table = record_table(_records(obs, "gpus"), ("index", "state", "status"))
    note = ", ".join(f"{k.replace('_', ' ')}: {obs[k]}" for k in ("manager", "state_error")
                     if isinstance(obs, Mapping) and obs.get(k))
    if table is None:
        return Panel("NVSwitch fabric", "panels/note.html.j2", None, note=note) if note else None
    return Panel("NVSwitch fabric", TABLE, table, note=note)


@panel("system")
def system_panel(obs: Any) -> Panel | None:
    table = scalars_table(obs) if isinstance(obs, Mapping) else None
    return Panel("system", TABLE, table) if table else None


@panel("benchmarks")
def benchmarks_panel(obs: Any) -> Panel | None:
    """The host's benchmark jobs (``benchmarks/grade.py`` summaries): test, shape, partners, metric."""
    rows, classes = [], []
    for bench, jobs in sorted(obs.items()) if isinstance(obs, Mapping) else ():
        for job in jobs if isinstance(jobs, list) else ():
            if not isinstance(job, Mapping):
                continue
            metric = _num(job.get("metric"))
            rows.append([bench, job.get("test") or "", job.get("shape") or "", ", ".join(job.get("hosts") or []),
                         "" if metric is None else f"{metric:g}", job.get("status") or "", job.get("job_id") or ""])
            classes.append(["", "", "", "", "", "" if job.get("status") in (None, "PASS") else "bad", ""])
    if not rows:
        return None
    table = Table(columns=["benchmark", "test", "shape", "hosts", "metric", "status", "job (raw/_jobs/)"],
                  rows=rows, classes=classes)
    return Panel(f"benchmark jobs ({len(rows)})", TABLE, table)
