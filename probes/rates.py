"""Error rates, not only totals: IB, NVLink and PCIe AER counters per hour between two collections.

    counter-clock -> "1795000000\\n5c3e1c0e-...-boot-id\\n12345.67 ..."  (``date -u +%s``, boot id, /proc/uptime)
    ib-sysfs, nvidia-smi-nvlink-e, pcie-aer                  (the infiniband, nvlink and ras probes' commands)
    ethtool-stats -> ``ethtool -S`` of each RoCE netdev of an RDMA device (``probes/ethtool_parse.py``)

The previous collection comes from ``--previous RUN_DIR`` or, in ``healthcheck sweep``, the last recorded
run (``ctx.previous["rates"]``: this probe's own observations of that run, node clock included). A rate is
``(now - before) / hours between the two collections``, graded against ``rate.<family>.<counter>`` in the
profile (per hour). The hours are the collector's: the times it recorded for the two collections
(``ctx.collected_at``, ``ctx.previous_at``), cross-checked with the node's clock; a node clock that does
not agree (a reset to 0, a clock in 2100) is ``rate.clock`` ERROR naming both clocks, and a collection
without a recorded time gives no rate (SKIP): the interval is never the node's word alone. A counter that
went backwards (reset, driver reload, swapped part) or a changed boot id restarts the baseline: no rate, no
negative or huge number, and a SKIP saying so. Check ids:

  ``rate.ib.<counter>``       per port (``mlx5_0/1``): symbol_error, link_downed, ... (sysfs ``counters``)
  ``rate.ib_hw.<counter>``    per port: mlx5 ``hw_counters`` (rnr_nak_retry_err, local_ack_timeout_err, ...)
  ``rate.eth.<counter>``      per RoCE netdev (``mlx5_0 ens1f0np0``): ``ethtool -S`` pause/discard/PHY counters
  ``rate.nvlink.<counter>``   per link (``gpu3 link 5``): replay, recovery, crc
  ``rate.aer.<counter>``      per PCI function: correctable, nonfatal, fatal
  ``rate.baseline``           no previous collection, node rebooted, interval too short, counters reset,
                              no recorded collection time
  ``rate.clock``              the node's clock and the collector's times disagree: no rate
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from healthcheck.core.grading import grade_value
from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.spec import EvalContext, ParseError, ProbeSpec
from healthcheck.probes import register
from healthcheck.probes.ethtool_parse import parse_ethtool_stats
from healthcheck.probes.fabric_counters import info as counter_info
from healthcheck.probes.ib_parse import COUNTER_BITS, parse_ib_sysfs
from healthcheck.probes.infiniband import COMMANDS as IB_COMMANDS
from healthcheck.probes.infiniband import SYSFS
from healthcheck.probes.nvlink import ERRORS_ID, parse_nvidia_smi_nvlink_e
from healthcheck.probes.ras import COMMANDS as RAS_COMMANDS
from healthcheck.probes.ras_parse import parse_aer_sysfs

CLOCK_ID = "counter-clock"
ETHTOOL_ID = "ethtool-stats"
# the Ethernet (type 1) netdevs of RDMA devices: RoCE ports; IPoIB netdevs (type 32) are graded by ib-sysfs
ETHTOOL_STATS = (f"{SYSFS}; if command -v ethtool >/dev/null 2>&1; then "
                 'for n in "$sysfs"/class/infiniband/*/device/net/*; do '
                 '[ "$(cat "$n/type" 2>/dev/null)" = 1 ] || continue; d=${n#"$sysfs"/class/infiniband/}; '
                 'echo "# ethtool-stats ${d%%/*} ${n##*/}"; ethtool -S "${n##*/}" 2>&1; done; '
                 "echo '# ethtool-stats end'; else echo 'healthcheck: ethtool not installed'; fi")
COMMANDS = {CLOCK_ID: "date -u +%s; cat /proc/sys/kernel/random/boot_id; cat /proc/uptime",
            "ib-sysfs": IB_COMMANDS["ib-sysfs"], ERRORS_ID: "nvidia-smi nvlink -e",
            "pcie-aer": RAS_COMMANDS["pcie-aer"], ETHTOOL_ID: ETHTOOL_STATS}
SOURCES = {"ib": "ib-sysfs", "ib_hw": "ib-sysfs", "eth": ETHTOOL_ID, "nvlink": ERRORS_ID, "aer": "pcie-aer"}
MIN_INTERVAL_S = 60.0     # closer collections (a replay of the previous run itself) give no meaningful rate
CLOCK_TOLERANCE_S = 600.0  # node clock vs collector interval: a host's collection may take minutes
CLOCK_DRIFT = 0.01        # ... plus this share of the interval (clock drift between the two machines)
MAX_EPOCH_DIGITS = 12     # `date +%s` until the year 33658
_BOOT_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_REMEDY = {
    "ib": "Errors are accumulating on this port right now: check `mlxlink -d DEV -m` (BER, FEC), reseat or "
          "replace the cable/transceiver and check the switch port; a link_downed rate is a flapping link",
    "ib_hw": "RDMA transport errors are accumulating on this port: look for loss on its path (switch drops, PFC, a "
             "flapping link) and for a slow peer",
    "eth": "Pause, discard or PHY errors are accumulating on this RoCE port: check the cable (`mlxlink -m`), the "
           "switch port, and PFC/ECN settings against the fleet",
    "nvlink": "NVLink errors are accumulating: check the kernel log for Xid 74, run `dcgmi diag -r 3`; a rate "
              "that persists after a GPU reset points at the GPU or baseboard (RMA)",
    "aer": "PCIe errors are accumulating on this device: check `lspci -vvv -s BDF` link status, reseat the card, "
           "riser or cable, update firmware; uncorrectable ones warrant draining the node",
}

Counters = Mapping[str, Mapping[str, Mapping[str, int]]]   # family -> component -> counter -> value


@dataclass(frozen=True)
class CounterSnapshot:
    """Counters at one collection, with the node's clock and boot id."""

    epoch_s: int | None
    boot_id: str | None
    counters: Counters = field(default_factory=dict)
    uptime_s: float | None = None  # since boot: the fleet check's rates since boot (fleet.fabric_counters)
    unreadable: Mapping[str, str] = field(default_factory=dict)  # command id -> why (ethtool-stats only)


def parse_counter_clock(text: str) -> tuple[int, str | None, float | None]:
    """(epoch seconds, boot id, uptime seconds) from ``date +%s``, the boot id and /proc/uptime (older
    collections have no uptime line: None)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].isdigit() or len(lines[0]) > MAX_EPOCH_DIGITS:
        raise ParseError("counter-clock: first line is not `date +%s` epoch seconds", text[:200])
    boot = lines[1].lower() if len(lines) > 1 and _BOOT_ID.match(lines[1].lower()) else None
    return int(lines[0]), boot, _uptime(lines[2] if len(lines) > 2 else "")


def _uptime(line: str) -> float | None:
    first = line.split()[0] if line.split() else ""
    try:
        value = float(first)
    except ValueError:
        return None
    return value if 0 < value < 1e10 else None  # finite and below ~300 years


def parse_rates(outputs: Mapping[str, CommandResult]) -> CounterSnapshot:
    """The node clock and every counter this probe rates (sources that are absent are left out)."""
    clock = outputs.get(CLOCK_ID)
    epoch, boot, uptime = parse_counter_clock(clock.text) if clock is not None else (None, None, None)
    counters: dict[str, dict[str, dict[str, int]]] = {}
    unreadable: dict[str, str] = {}
    for command_id, read in _READERS.items():
        result = outputs.get(command_id)
        if result is None:
            continue
        try:
            families = read(result)
        except ParseError as exc:
            if command_id == ETHTOOL_ID:  # no other probe reads it: its fault is said here
                unreadable[command_id] = str(exc)
            continue  # the owning probe (infiniband, nvlink, ras) reports its unreadable output itself
        counters.update((family, values) for family, values in (families or {}).items() if values is not None)
    return CounterSnapshot(epoch_s=epoch, boot_id=boot, counters=counters, uptime_s=uptime, unreadable=unreadable)


Families = dict[str, dict[str, dict[str, int]] | None]


def _ib(result: CommandResult) -> Families | None:
    """Port counters (``ib``) and mlx5 hw_counters (``ib_hw``) of every port, from one parse."""
    if "# ib-sysfs end" not in result.text:
        return None
    ports = [p for d in parse_ib_sysfs(result.text) for p in d.ports]
    return {"ib": {p.name: dict(p.counters) for p in ports if p.counters},
            "ib_hw": {p.name: dict(p.hw_counters) for p in ports if p.hw_counters}}


def _eth(result: CommandResult) -> Families:
    return {"eth": parse_ethtool_stats(result.text)}


def _nvlink(result: CommandResult) -> Families | None:
    if result.rc != 0:
        return None
    out: dict[str, dict[str, int]] = {}
    for c in parse_nvidia_smi_nvlink_e(result.text):  # 144 links a node: the usual three ints named directly
        replay, recovery, crc = c.replay, c.recovery, c.crc
        if replay.__class__ is int and recovery.__class__ is int and crc.__class__ is int:
            out[f"gpu{c.gpu} link {c.link}"] = {"replay": replay, "recovery": recovery, "crc": crc}
        else:
            values = zip(_NVLINK_COUNTERS, (replay, recovery, crc), strict=True)
            out[f"gpu{c.gpu} link {c.link}"] = {k: v for k, v in values if isinstance(v, int)}
    return {"nvlink": out}


_NVLINK_COUNTERS = ("replay", "recovery", "crc")


def _aer(result: CommandResult) -> Families | None:
    if "# pcie-aer end" not in result.text:
        return None
    return {"aer": {bdf: {"correctable": c.correctable, "nonfatal": c.nonfatal, "fatal": c.fatal}
                    for bdf, c in parse_aer_sysfs(result.text).items()}}


_READERS = {"ib-sysfs": _ib, ETHTOOL_ID: _eth, ERRORS_ID: _nvlink, "pcie-aer": _aer}  # command id -> families


@dataclass(frozen=True)
class Rate:
    family: str
    component: str
    counter: str
    delta: int
    hours: float

    @property
    def per_hour(self) -> float:
        return self.delta / self.hours


def counter_rates(now: Counters, before: Counters, hours: float) -> tuple[list[Rate], list[str]]:
    """Rates of every counter present in both snapshots, and the ``family component counter`` names
    that went backwards (their baseline restarts: no rate). Pure."""
    rates, reset = [], []
    for family, components in sorted(now.items()):
        for component, values in sorted(components.items()):
            old = (before.get(family) or {}).get(component) or {}
            for counter, value in sorted(values.items()):
                prior = old.get(counter)
                if not isinstance(prior, int) or isinstance(prior, bool):
                    continue
                if value < prior:
                    reset.append(f"{component} {counter} ({prior} -> {value})")
                    continue
                rates.append(Rate(family, component, counter, value - prior, hours))
    return rates, reset


def previous_snapshot(previous: Any) -> CounterSnapshot | None:
    """This probe's observations of the previous run (JSON form), or None (``epoch_s`` not an integer:
    ``true`` is not a clock)."""
    if not isinstance(previous, Mapping) or type(previous.get("epoch_s")) is not int:
        return None
    return CounterSnapshot(epoch_s=previous["epoch_s"], boot_id=previous.get("boot_id"),
                           counters=previous.get("counters") or {})


def _baseline(host: str, message: str) -> Finding:
    return Finding(host=host, check="rate.baseline", status=Status.SKIP, source=CLOCK_ID, message=message)


def evaluate_rates(obs: CounterSnapshot, ctx: EvalContext) -> list[Finding]:
    """The rates, and an ERROR for each counter source only this probe reads that could not be read."""
    unreadable = [Finding(host=ctx.host.name, check="rate.source", component=command_id, status=Status.ERROR,
                          source=command_id, message=f"{command_id} could not be read: {why}",
                          remedy="Look at raw/<host>/ for the command's output; rerun the collection")
                  for command_id, why in sorted(obs.unreadable.items())]
    return unreadable + _rated(obs, ctx)


def _rated(obs: CounterSnapshot, ctx: EvalContext) -> list[Finding]:
    host = ctx.host.name
    keys = [k for k in ctx.profile.expectations if k.startswith("rate.")]
    if not keys:
        return [_baseline(host, f"profile {ctx.profile.name} has no rate.* thresholds: error rates not graded")]
    if obs.epoch_s is None:
        return [_baseline(host, "counter-clock was not collected (not in this bundle): no rates")]
    before = previous_snapshot(ctx.previous.get("rates"))
    if before is None or before.epoch_s is None:
        return [_baseline(host, "no previous collection of this host (--previous, sweep history): "
                                "this run is the baseline, rates start with the next one")]
    if obs.boot_id and before.boot_id and obs.boot_id != before.boot_id:
        return [_baseline(host, "the node rebooted since the previous collection (boot id changed): "
                                "counters restarted, this run is the new baseline")]
    seconds, clocks = trusted_interval(obs.epoch_s, before.epoch_s, ctx)
    if clocks is not None or seconds is None:
        return [clocks] if clocks is not None else []
    if seconds < MIN_INTERVAL_S:
        return [_baseline(host, f"{seconds:g} s since the previous collection (collector's times): too short "
                                f"for a rate (at least {MIN_INTERVAL_S:g} s)")]
    rates, reset = counter_rates(obs.counters, before.counters, seconds / 3600)
    out = [_grade(host, r, ctx) for r in rates if ctx.profile.expect(f"rate.{r.family}.{r.counter}")]
    bad = [f for f in out if f.status is not Status.PASS]
    passed = len(out) - len(bad)
    if passed:
        bad.append(Finding(host=host, check="rate.counters", status=Status.PASS, value=passed, source=CLOCK_ID,
                           message=f"{passed} error counters within their hourly rates over "
                                   f"{seconds / 3600:.1f} h"))
    if reset:
        bad.append(_baseline(host, f"{len(reset)} counters went backwards (reset, driver reload or swapped "
                                   f"part), baseline restarted: {', '.join(reset[:5])}"
                                   + (f" (+{len(reset) - 5} more)" if len(reset) > 5 else "")))
    return bad or [_baseline(host, "no counter present in both collections")]


def trusted_interval(now_epoch: int, before_epoch: int, ctx: EvalContext) -> tuple[float | None, Finding | None]:
    """Seconds between the two collections by the collector's recorded times, when the node's clock agrees
    (within ``CLOCK_TOLERANCE_S`` plus ``CLOCK_DRIFT`` of the interval); else (None, the finding saying why)."""
    host = ctx.host.name
    if ctx.collected_at is None or ctx.previous_at is None:
        which = "this collection" if ctx.collected_at is None else "the previous collection"
        return None, _baseline(host, f"the collector's time of {which} is not recorded (_host.json collected_at): "
                                     "no trusted interval, no rate (the node's clock alone is not one)")
    collector_s = (ctx.collected_at - ctx.previous_at).total_seconds()
    node_s = now_epoch - before_epoch
    tolerance = CLOCK_TOLERANCE_S + CLOCK_DRIFT * abs(collector_s)
    if collector_s > 0 and abs(node_s - collector_s) <= tolerance:
        return collector_s, None
    said = (f"node clock {before_epoch} -> {now_epoch} ({node_s / 3600:.1f} h apart), collector "
            f"{ctx.previous_at.isoformat(timespec='seconds')} -> {ctx.collected_at.isoformat(timespec='seconds')} "
            f"({collector_s / 3600:.1f} h apart)")
    why = ("the collector's times go backwards" if collector_s <= 0
           else f"they disagree by more than {tolerance:.0f} s")
    return None, Finding(host=host, check="rate.clock", status=Status.ERROR, source=CLOCK_ID, value=node_s,
                         unit="s", expected=f"the collector's interval {collector_s:.0f} s +- {tolerance:.0f} s",
                         message=f"no error rates: {said}: {why}",
                         remedy="Check the node's clock (chronyc tracking, timedatectl) and the collector's; "
                                "the next run after both agree restarts the rates")


def _grade(host: str, rate: Rate, ctx: EvalContext) -> Finding:
    check = f"rate.{rate.family}.{rate.counter}"
    entry = counter_info(rate.family, rate.counter)
    grade = grade_value(check, ctx.profile.expect(check), round(rate.per_hour, 3), profile=ctx.profile,
                        remedy=f"{entry.meaning[:1].upper()}{entry.meaning[1:]}. {entry.remedy}" if entry
                        else _REMEDY[rate.family])
    if grade.status is Status.PASS:
        return grade.finding(host, rate.component, SOURCES[rate.family])
    bits = COUNTER_BITS.get(rate.counter) if rate.family == "ib" else None
    note = " (the counter is saturated: the true rate is higher)" if bits and rate.delta >= (1 << bits) - 1 else ""
    return grade.finding(host, rate.component, SOURCES[rate.family],
                         note=f" [{rate.delta} in {rate.hours:.2f} h{note}]")


PROBE = register(ProbeSpec(
    name="rates",
    description="IB/RoCE (port, mlx5 hw and ethtool), NVLink and PCIe AER error counters as hourly rates since "
                "the previous collection",
    command_map=COMMANDS,
    parse_fn=parse_rates,
    evaluate_fn=evaluate_rates,
))
