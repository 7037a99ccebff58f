"""Parsers for GPU field samples: ``dcgmi dmon``, ``nvidia-smi dmon`` and ``nvidia-smi --query-gpu`` CSV.

    table = parse_dcgmi_dmon(text)        # dcgmi dmon -e 150,155,100,112 -c 5 -d 1000
    table.quantities                      # ('gpu_temp_c', 'power_w', 'sm_clock_mhz', 'clock_event_reasons')
    table.samples[0]                      # FieldSample(entity='gpu0', sample=0, t_s=0.0, values={...})
    parse_field_samples(text)             # any of the three, chosen by the sampler marker or the header

Every format becomes the same ``FieldTable``: one ``FieldSample`` per entity (``gpu3``) per sampling
round, values keyed by quantity names with the unit in the name (``power_w``, ``power_violation_s``),
converted once here (DCGM violation times are ns, nvidia-smi event counters us). ``N/A``, ``-``,
``[N/A]`` and ``[Not Supported]`` become None. Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from healthcheck.core.spec import ParseError


@dataclass(frozen=True)
class DcgmField:
    """One DCGM field: id, the short tag ``dcgmi dmon`` prints as column header, our quantity name."""

    field_id: int
    tag: str
    quantity: str
    scale: float = 1.0  # raw value x scale = quantity (ns -> s)


# Ids, tags and units: NVIDIA/DCGM dcgmlib/dcgm_fields.h and dcgmlib/src/dcgm_fields.cpp (tags unchanged
# from DCGM 2.x to 4.x; 4.x renamed the C macros, old names kept as aliases).
FIELDS = (
    DcgmField(100, "SMCLK", "sm_clock_mhz"),
    DcgmField(101, "MMCLK", "memory_clock_mhz"),
    DcgmField(112, "DVCCTR", "clock_event_reasons"),       # bitmask (was CLOCK_THROTTLE_REASONS)
    DcgmField(140, "MMTMP", "memory_temp_c"),
    DcgmField(150, "TMPTR", "gpu_temp_c"),
    DcgmField(155, "POWER", "power_w"),
    DcgmField(158, "SDTMP", "slowdown_temp_c"),
    DcgmField(202, "RPCTR", "pcie_replay_count"),
    DcgmField(203, "GPUTL", "gpu_util_pct"),
    DcgmField(204, "MCUTL", "memory_copy_util_pct"),
    DcgmField(230, "XIDER", "xid_last"),                   # the last XID seen, not a count
    DcgmField(240, "PVIOL", "power_violation_s", 1e-9),    # cumulative ns
    DcgmField(241, "TVIOL", "thermal_violation_s", 1e-9),  # cumulative ns
    DcgmField(252, "FBUSD", "fb_used_mib"),
    DcgmField(310, "ESVTL", "ecc_sbe_volatile"),
    DcgmField(311, "EDVTL", "ecc_dbe_volatile"),
    DcgmField(395, "RRF", "row_remap_failure"),
    DcgmField(396, "RRP", "row_remap_pending"),
    DcgmField(409, "NFELT", "nvlink_crc_flit_errors"),
    DcgmField(419, "NDELT", "nvlink_crc_data_errors"),
    DcgmField(429, "NRELT", "nvlink_replay_errors"),
    DcgmField(439, "NRCLT", "nvlink_recovery_errors"),
    DcgmField(1009, "PCITX", "pcie_tx_bytes"),
    DcgmField(1010, "PCIRX", "pcie_rx_bytes"),
    DcgmField(1011, "NVLTX", "nvlink_tx_bytes"),
    DcgmField(1012, "NVLRX", "nvlink_rx_bytes"),
)
BY_ID = {f.field_id: f for f in FIELDS}
BY_TAG = {f.tag: f for f in FIELDS}
# GPU temperature, memory temperature, power, SM clock, clock event reasons, power/thermal violation,
# XID, ECC SBE/DBE volatile, row remap pending/failure, PCIe replays, NVLink CRC flit/data, replay,
# recovery, and the GPU's own slowdown temperature (the limit peak temperatures are graded against).
DEFAULT_FIELD_IDS = (150, 140, 155, 100, 112, 240, 241, 230, 310, 311, 396, 395, 202, 409, 419, 429, 439, 158)

SAMPLER_MARK = "healthcheck-sampler:"
_NONE = {"n/a", "-", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[requested functionality "
         "has been deprecated]", ""}
_ENTITY = re.compile(r"^(?P<kind>[A-Za-z][A-Za-z-]*)(?: (?P<parent>\d+) LINK)? (?P<id>\d+)(?=\s|$)")
_STOPPED = "dmon was stopped due to receiving a signal"


@dataclass(frozen=True)
class FieldSample:
    """The values of one entity in one sampling round (``t_s`` from the first round, when known)."""

    entity: str
    sample: int
    values: Mapping[str, float | None]
    t_s: float | None = None


@dataclass(frozen=True)
class FieldTable:
    """Samples of one sampler run. ``unavailable`` says why no sampler could run (then no samples)."""

    source: str                       # dcgmi-dmon | nvidia-smi-dmon | nvidia-smi-query | none
    quantities: tuple[str, ...]
    samples: tuple[FieldSample, ...]
    interval_s: float | None = None
    truncated: bool = False
    stopped: bool = False             # the sampler was stopped on purpose (end of a benchmark job)
    notes: tuple[str, ...] = ()       # tool messages between rows (errors, "dmon was stopped ...")
    unavailable: str | None = None

    @property
    def entities(self) -> list[str]:
        return list(dict.fromkeys(s.entity for s in self.samples))

    def rounds(self) -> int:
        return 1 + max((s.sample for s in self.samples), default=-1)


def _number(token: str, column: str, line: str) -> float | None:
    text = token.strip()
    if text.lower() in _NONE:
        return None
    text = re.sub(r"\s*(?:W|MHz|MiB|C|us|%)$", "", text)
    try:
        value = float(int(text, 16)) if text.lower().startswith("0x") else float(text)
    except (ValueError, OverflowError):
        raise ParseError(f"column {column}: {token!r} is not a number", line) from None
    if not math.isfinite(value):  # nan/inf: no measurement (ERROR), never a FAIL on "nan C"
        raise ParseError(f"column {column}: {token!r} is not a finite number", line)
    return value


def _entity_name(m: re.Match[str]) -> str:
    kind = m["kind"].lower()
    if m["parent"] is not None:
        return f"{kind}{m['parent']} link {m['id']}"
    return f"{kind}{m['id']}"


@dataclass
class _Rounds:
    """Numbers the sampling rounds: a round ends when an entity shows up a second time."""

    seen: set[str] = field(default_factory=set)
    index: int = 0

    def next(self, entity: str) -> int:
        if entity in self.seen:
            self.index += 1
            self.seen = set()
        self.seen.add(entity)
        return self.index


def _cells(line: str, start: int, offsets: Sequence[int], count: int) -> list[str]:
    """Values of one row: its whitespace tokens, or (blank cells) slices at the header's offsets."""
    tokens = line[start:].split()
    if len(tokens) == count:
        return tokens
    if len(tokens) > count:
        raise ParseError(f"row has {len(tokens)} values for {count} columns", line)
    padded = line.ljust(offsets[-1] + 1)
    cells = [padded[a:b].strip() for a, b in zip(offsets, [*offsets[1:], None], strict=False)]
    if padded[start:offsets[0]].strip() or any(" " in c for c in cells):
        raise ParseError(f"row does not line up with the {count} header columns", line)
    return cells


@dataclass
class _DmonState:
    header: list[str] | None = None
    offsets: list[int] = field(default_factory=list)
    quantities: list[str] = field(default_factory=list)
    samples: list[FieldSample] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rounds: _Rounds = field(default_factory=_Rounds)
    truncated: bool = False
    stopped: bool = False

    def set_header(self, line: str) -> None:
        tags = line.split()[1:]
        if self.header is not None and tags != self.header:
            raise ParseError(f"dcgmi dmon header changed from {self.header} to {tags}", line)
        if self.header is None:
            self.header = tags
            self.quantities = [BY_TAG[t].quantity if t in BY_TAG else t.lower() for t in tags]
            self.offsets = _tag_offsets(line, tags)

    def add_row(self, line: str, m: re.Match[str], last: bool, interval_s: float | None) -> None:
        assert self.header is not None
        if last and len(line[m.end():].split()) < len(self.header):
            self.truncated = True  # the final row was cut off mid-write (output cap, kill)
            return
        cells = _cells(line, m.end(), self.offsets, len(self.header))
        values = {q: _scaled(tag, _number(c, tag, line))
                  for q, tag, c in zip(self.quantities, self.header, cells, strict=True)}
        entity = _entity_name(m)
        index = self.rounds.next(entity)
        self.samples.append(FieldSample(entity, index, values, index * interval_s if interval_s else None))


def parse_dcgmi_dmon(text: str, interval_s: float | None = None) -> FieldTable:
    """``dcgmi dmon -e IDS [-c N] [-d MS]`` (DCGM 2.x-4.x) -> FieldTable.

    Layout (DCGM ``dcgmi/DeviceMonitor.cpp``; corpus ``dcgmi/dmon-e230-xid-errors-gpu1-xid120``,
    ``dmon-e-203-204-252-c5-l4-dcgm4.6.1-under-training``, ``dmon-pcie-nvlink-fields-gpu0-h800``): a
    ``#Entity TAG TAG ...`` header, an ``ID`` line carrying units (empty on older releases), then one
    row per entity per round (``GPU 0``, ``GPU 0 LINK 3``); the header repeats every few rounds. ``N/A``
    is None; a blank cell (a field with no value for that entity) is read at the header's column
    offsets. Text before the first header (prompts, our sampler marker) is skipped, other lines
    between rows are kept as ``notes``; a final row cut off mid-write or an elision ``...`` sets
    ``truncated``. No header, a row with too many values or a non-numeric value raises ``ParseError``.
    """
    state = _DmonState()
    lines = [raw.rstrip() for raw in text.splitlines()]
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    for number, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("#Entity"):
            state.set_header(line)
        elif state.header is None or not stripped or re.match(r"^ID(\s|$)", stripped):
            continue
        elif stripped == "...":
            state.truncated = True
        elif stripped == _STOPPED or stripped.startswith(SAMPLER_MARK):
            state.stopped = state.stopped or stripped == _STOPPED or stripped.endswith("stopped")
        elif (m := _ENTITY.match(line)) is not None:
            state.add_row(line, m, number == last, interval_s)
        else:
            state.notes.append(stripped[:200])
    if state.header is None:
        raise ParseError("no '#Entity' header: not dcgmi dmon output", text.strip()[:200])
    return FieldTable("dcgmi-dmon", tuple(state.quantities), tuple(state.samples), interval_s, state.truncated,
                      state.stopped, tuple(state.notes))


def _tag_offsets(line: str, tags: Sequence[str]) -> list[int]:
    offsets, pos = [], line.index("#Entity") + len("#Entity")
    for tag in tags:
        pos = line.index(tag, pos)
        offsets.append(pos)
        pos += len(tag)
    return offsets


def _scaled(tag: str, value: float | None) -> float | None:
    spec = BY_TAG.get(tag)
    return value * spec.scale if value is not None and spec is not None and spec.scale != 1.0 else value


# nvidia-smi dmon columns (nvidia-smi(1) "dmon"): pclk is the processor (graphics) clock, the clock
# domain the SMs run in (corpus nvidia-smi-dmon-h100-load: pclk 1980 MHz = H100 SXM max SM clock).
_SMI_DMON = {"pwr": "power_w", "gtemp": "gpu_temp_c", "mtemp": "memory_temp_c", "sm": "sm_util_pct",
             "mem": "memory_util_pct", "enc": "encoder_util_pct", "dec": "decoder_util_pct",
             "jpg": "jpeg_util_pct", "ofa": "ofa_util_pct", "mclk": "memory_clock_mhz", "pclk": "sm_clock_mhz"}


def parse_nvidia_smi_dmon(text: str, interval_s: float | None = 1.0) -> FieldTable:
    """``nvidia-smi dmon [-s ...] [-c N]`` -> FieldTable (corpus ``misc/nvidia-smi-dmon-h100-load``).

    ``# gpu pwr gtemp ...`` header, ``# Idx W C ...`` units, then one row per GPU per round, ``-``
    for unsupported values; ``Date``/``Time`` columns (``-o DT``) are dropped. Columns we do not
    know keep their own name. No header or a non-numeric value raises ``ParseError``.
    """
    names: list[str] | None = None
    samples: list[FieldSample] = []
    rounds, truncated = _Rounds(), False
    for line in text.splitlines():
        tokens = line.split()
        if not tokens or tokens[0].startswith(SAMPLER_MARK.split(":")[0]):
            continue
        if tokens[0] == "#" or tokens[0].startswith("#"):
            words = [t.lstrip("#") for t in tokens if t.lstrip("#")]
            if names is None and "gpu" in [w.lower() for w in words]:
                names = [w.lower() for w in words]
            continue
        if names is None:
            continue
        if len(tokens) != len(names):
            truncated = True
            continue
        row = {n: t for n, t in zip(names, tokens, strict=True) if n not in ("date", "time")}
        entity = f"gpu{int(_number(row.pop('gpu'), 'gpu', line) or 0)}"
        values = {_SMI_DMON.get(n, n): _number(t, n, line) for n, t in row.items()}
        index = rounds.next(entity)
        samples.append(FieldSample(entity, index, values, index * interval_s if interval_s else None))
    if names is None or "gpu" not in names:
        raise ParseError("no '# gpu ...' header: not nvidia-smi dmon output", text.strip()[:200])
    quantities = tuple(_SMI_DMON.get(n, n) for n in names if n not in ("gpu", "date", "time"))
    return FieldTable("nvidia-smi-dmon", quantities, tuple(samples), interval_s, truncated)


# nvidia-smi --query-gpu names (nvidia-smi --help-query-gpu; corpus nvidia-smi/h100-query-gpu-allfields-csv-load)
# -> quantity; clocks_throttle_reasons.* is the pre-535 driver name of clocks_event_reasons.*.
QUERY_FIELDS = {
    "temperature.gpu": "gpu_temp_c", "temperature.memory": "memory_temp_c", "power.draw": "power_w",
    "clocks.current.sm": "sm_clock_mhz", "clocks.sm": "sm_clock_mhz",
    "clocks_event_reasons.active": "clock_event_reasons", "clocks_throttle_reasons.active": "clock_event_reasons",
    "clocks_event_reasons_counters.hw_thermal_slowdown": "hw_thermal_s",
    "clocks_event_reasons_counters.hw_power_brake_slowdown": "hw_power_brake_s",
    "clocks_event_reasons_counters.sw_thermal_slowdown": "sw_thermal_s",
    "ecc.errors.corrected.volatile.total": "ecc_sbe_volatile",
    "ecc.errors.uncorrected.volatile.total": "ecc_dbe_volatile",
    "remapped_rows.pending": "row_remap_pending", "remapped_rows.failure": "row_remap_failure",
}
QUERY_GPU = ("timestamp,index,temperature.gpu,temperature.memory,power.draw,clocks.current.sm,"
             "clocks_event_reasons.active,clocks_event_reasons_counters.hw_thermal_slowdown,"
             "clocks_event_reasons_counters.hw_power_brake_slowdown,clocks_event_reasons_counters.sw_thermal_slowdown,"
             "ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,"
             "remapped_rows.pending,remapped_rows.failure")
QUERY_GPU_PRE535 = "timestamp,index,temperature.gpu,temperature.memory,power.draw,clocks.current.sm," \
                   "clocks_throttle_reasons.active,ecc.errors.corrected.volatile.total," \
                   "ecc.errors.uncorrected.volatile.total,remapped_rows.pending,remapped_rows.failure"
_QUERY_SCALE = {"hw_thermal_s": 1e-6, "hw_power_brake_s": 1e-6, "sw_thermal_s": 1e-6}  # counters are in us
_FLAGS = {"yes": 1.0, "no": 0.0, "active": 1.0, "not active": 0.0}


def _timestamp(text: str) -> float | None:
    try:
        return datetime.strptime(text.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
    except ValueError:
        return None


def parse_nvidia_smi_query_csv(text: str, interval_s: float | None = None) -> FieldTable:
    """``nvidia-smi --query-gpu=timestamp,index,... --format=csv``, run in a loop -> FieldTable.

    The header (``power.draw [W]``) names the columns and may repeat once per loop; values carry
    units (``631.95 W``, ``1980 MHz``, ``0 us``), the event mask is hex (``0x...0008``), remap flags
    are ``Yes``/``No``. ``t_s`` comes from the ``timestamp`` column. Columns are mapped by name
    (``QUERY_FIELDS``), unknown ones are dropped. No header, or a row whose arity differs from the
    header, raises ``ParseError``.
    """
    names: list[str] | None = None
    samples: list[FieldSample] = []
    rounds, start = _Rounds(), None
    for line in text.splitlines():
        if not line.strip() or line.startswith(SAMPLER_MARK):
            continue
        cells = [c.strip() for c in line.split(",")]
        if cells[0] == "timestamp":
            names = [re.sub(r"\s*\[.*\]$", "", c) for c in cells]
            continue
        if names is None:
            raise ParseError("no 'timestamp, index, ...' header: not nvidia-smi --query-gpu CSV", line)
        if len(cells) != len(names):
            raise ParseError(f"row has {len(cells)} values for {len(names)} columns", line)
        row = dict(zip(names, cells, strict=True))
        stamp = _timestamp(row.get("timestamp", ""))
        start = stamp if start is None else start
        entity = f"gpu{int(_number(row.get('index', ''), 'index', line) or 0)}"
        values: dict[str, float | None] = {}
        for name, quantity in QUERY_FIELDS.items():
            if name in row:
                raw = row[name].lower()
                value = _FLAGS[raw] if raw in _FLAGS else _number(row[name], name, line)
                values[quantity] = value * _QUERY_SCALE[quantity] if value is not None and \
                    quantity in _QUERY_SCALE else value
        t_s = round(stamp - start, 3) if stamp is not None and start is not None else None
        samples.append(FieldSample(entity, rounds.next(entity), values, t_s))
    if names is None:
        raise ParseError("no 'timestamp, index, ...' header: not nvidia-smi --query-gpu CSV", text.strip()[:200])
    quantities = tuple(dict.fromkeys(QUERY_FIELDS[n] for n in names if n in QUERY_FIELDS))
    return FieldTable("nvidia-smi-query", quantities, tuple(samples), interval_s)


def _marker(text: str) -> dict[str, str]:
    """``healthcheck-sampler: dcgmi interval_ms=1000 count=5`` -> {"tool": "dcgmi", "interval_ms": "1000", ...}."""
    for line in text.splitlines():
        if line.startswith(SAMPLER_MARK):
            words = line[len(SAMPLER_MARK):].split(None, 1)
            if words and words[0] == "none":
                return {"tool": "none", "reason": words[1].strip() if len(words) > 1 else "no sampler"}
            return {"tool": words[0] if words else "", **dict(re.findall(r"(\w+)=(\S+)", line))}
    return {}


def parse_field_samples(text: str) -> FieldTable:
    """The output of our sampler (``probes.dcgm_fields.sampler_script``) or of a plain tool run.

    The first ``healthcheck-sampler:`` line names the tool and the interval; without it the format
    is recognised by its header (``#Entity``, ``# gpu``, ``timestamp,``). ``none`` (no usable tool
    on the node) gives a table with ``unavailable`` set and no samples.
    """
    mark = _marker(text)
    tool = mark.get("tool")
    interval = float(mark["interval_ms"]) / 1000 if mark.get("interval_ms", "").isdecimal() else None
    stopped = any(line.strip() == f"{SAMPLER_MARK} stopped" for line in text.splitlines())
    if tool == "none":
        return FieldTable("none", (), (), unavailable=mark["reason"])
    if tool == "dcgmi" or (tool is None and "#Entity" in text):
        table = parse_dcgmi_dmon(text, interval or 1.0)
    elif tool == "nvidia-smi" or (tool is None and text.lstrip().startswith("timestamp")):
        table = parse_nvidia_smi_query_csv(text, interval)
    elif tool is None and re.search(r"^#\s*gpu\s", text, re.M):
        table = parse_nvidia_smi_dmon(text)
    else:
        raise ParseError(f"unknown sampler output (marker tool {tool!r})", text.strip()[:200])
    why = (f"dcgmi not used: {mark['why']}",) if mark.get("why") else ()
    return FieldTable(table.source, table.quantities, table.samples, table.interval_s, table.truncated,
                      table.stopped or stopped, why + table.notes)

