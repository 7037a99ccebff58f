"""NVLink probe: per GPU and link, state and speed (``nvidia-smi nvlink -s``) and error counters
(``nvidia-smi nvlink -e``), with the counters' growth since the previous run.

    GPU 3: Tesla V100-SXM2-32GB (UUID: ...)          GPU 0: NVIDIA H100 80GB HBM3 (UUID: ...)
             Link 0: 25.781 GB/s                               Link 0: Replay Errors: 0
             Link 3: <inactive>                                Link 0: Recovery Errors: 0
                                                               Link 0: CRC Errors: 0

GPUs whose active link count passes fold into one ``nvlink.links`` finding (``all 8 GPUs: NVLinks active
18 links``); a GPU short of links, an inactive link and a slow one keep their own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.core.grading import Outcome, ValueGrades, expected_text, fold
from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.profiles import Expectation
from healthcheck.core.spec import EvalContext, ParseError, ProbeSpec
from healthcheck.probes import register
from healthcheck.probes.parse_memo import memoized, shared_parser

STATUS_ID, ERRORS_ID = "nvidia-smi-nvlink-s", "nvidia-smi-nvlink-e"
_GPU = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?)(?: \(UUID: [^)]*\))?\s*$")
_SPEED = re.compile(r"^Link (?P<link>\d+): (?:(?P<gbps>\d+(?:\.\d+)?) GB/s|(?P<inactive><inactive>))$", re.I)
_COUNTER = re.compile(r"^Link (?P<link>\d+): (?P<name>[A-Za-z][A-Za-z ]*?): (?P<value>\d+|N/A)$")
# Publisher elisions in the corpus ('...', '[...]', a markdown fence) and prompt lines, never tool output.
_NOISE = re.compile(r"^(?:\.{3,}|\[\.\.\.\]|```|\$ .*|> .*|nvidia-smi .*)$")
_STATES = (  # (pattern, state) for a GPU whose links nvidia-smi cannot list
    (re.compile(r"all links are inactive", re.I), "all_inactive"),
    (re.compile(r"not supported for Devices in MIG mode", re.I), "mig"),
    (re.compile(r"does not have or support Nvlink", re.I), "no_nvlink"),
)
_STATE_PHRASES = tuple(pat.pattern.lower() for pat, _ in _STATES)  # the patterns are plain phrases
COUNTERS = ("replay", "recovery", "crc")


@dataclass(frozen=True)
class LinkState:
    link: int
    active: bool
    speed_gbps: float | None = None  # GB/s as nvidia-smi prints it; None when inactive


@dataclass(frozen=True)
class LinkCounters:
    """Counters since driver load; CRC is flit + data where the driver splits them."""

    gpu: int
    link: int
    replay: int | None = None
    recovery: int | None = None
    crc: int | None = None


@dataclass(frozen=True)
class GpuLinks:
    """``state``: ``ok`` (links listed), ``all_inactive``, ``mig`` or ``no_nvlink``."""

    index: int
    name: str
    state: str
    links: tuple[LinkState, ...] = ()


@dataclass(frozen=True)
class NvLinkObservation:
    gpus: tuple[GpuLinks, ...]
    counters: tuple[LinkCounters, ...] = ()
    counters_read: bool = False


def _blocks(text: str, tool: str) -> Iterator[tuple[int, str, list[str]]]:
    """(gpu index, name, stripped body lines) per ``GPU N:`` block; junk outside a block raises."""
    current: tuple[int, str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Link ") and current is not None:  # neither noise nor a header: most lines
            current[2].append(line)
            continue
        if not line or _NOISE.match(line):
            continue
        m = _GPU.match(line)
        if m:
            if current:
                yield current
            current = (int(m["index"]), m["name"], [])
        elif current is None:
            raise ParseError(f"{tool}: line before any 'GPU N:' header: {line!r}", text)
        else:
            current[2].append(line)
    if current:
        yield current


def _mentions_state(text: str) -> bool:
    """Whether any ``_STATES`` message is anywhere in ``text``. ASCII text: a substring search of its
    lower case, far cheaper than the case-insensitive patterns and the same answer; other text: the
    patterns themselves (their Unicode case rules are not ``str.lower``'s)."""
    if text.isascii():
        lowered = text.lower()
        return any(phrase in lowered for phrase in _STATE_PHRASES)
    return any(pat.search(text) for pat, _ in _STATES)


def _gpu_state(body: tuple[str, ...]) -> str | None:
    """The state of a GPU whose links nvidia-smi cannot list (the first of ``_STATES`` found), else None."""
    if not _mentions_state("\n".join(body)):  # no line holds a message: nothing to look for line by line
        return None
    return next((s for pat, s in _STATES for line in body if pat.search(line)), None)


class _UnexpectedLine(ValueError):
    """A body line that is not a link line (the caller names the GPU in its ParseError)."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line


def parse_nvidia_smi_nvlink_s(text: str) -> tuple[GpuLinks, ...]:
    """``nvidia-smi nvlink -s`` (drivers 450-59x; corpus nvlink/*status*, *inactive*, *mig*, l40s).

    Link lines are ``Link N: 26.562 GB/s`` or ``Link N: <inactive>`` (any indentation); a GPU whose
    links cannot be listed carries a state (all inactive, any casing; MIG; no NVLink). Empty output
    (what some drivers print on GPUs without NVLink) gives no GPUs. An unknown line raises.
    """
    gpus = []
    for index, name, body in _blocks(text, "nvlink -s"):
        try:
            state, links = _link_states(tuple(body))
        except _UnexpectedLine as exc:
            raise ParseError(f"nvlink -s GPU {index}: unexpected line {exc.line!r}", exc.line) from None
        if state is None and not links:
            raise ParseError(f"nvlink -s GPU {index}: no link lines (truncated?)", text)
        gpus.append(GpuLinks(index=index, name=name, state=state or "ok", links=links))
    if not gpus and text.strip():
        raise ParseError("nvlink -s: no 'GPU N:' block", text)
    return tuple(gpus)


@memoized(maxsize=128)  # every GPU of a healthy node prints the same block, and so does every node
def _link_states(body: tuple[str, ...]) -> tuple[str | None, tuple[LinkState, ...]]:
    """One GPU's ``nvlink -s`` lines -> (its state when links cannot be listed, else None; its links)."""
    state = _gpu_state(body)
    if state:
        return state, ()
    links = []
    for line in body:
        m = _SPEED.match(line)
        if not m:
            raise _UnexpectedLine(line)
        gbps = m["gbps"]
        links.append(LinkState(link=int(m["link"]), active=not m["inactive"],
                               speed_gbps=float(gbps) if gbps else None))
    return None, tuple(links)


@memoized(maxsize=64, typed=False)
def _counter_kind(name: str) -> str | None:
    """``Replay Errors`` -> ``replay``; ``CRC Flit Errors`` -> ``crc``; an unknown counter -> None."""
    return next((k for k in COUNTERS if k in name.lower()), None)


@shared_parser  # the nvlink and rates probes both read nvidia-smi nvlink -e: one parse per host
def parse_nvidia_smi_nvlink_e(text: str) -> tuple[LinkCounters, ...]:
    """``nvidia-smi nvlink -e`` (corpus ``nvlink/h100-nvlink-e-error-counters-elided``).

    ``Link N: Replay Errors: 0`` / ``Recovery Errors`` / ``CRC Errors`` (drivers that split CRC
    into flit and data counters are summed); ``N/A`` is None; GPU-level messages (MIG, no NVLink,
    all inactive) give no counters for that GPU. Unknown counter names are ignored.
    """
    out: list[LinkCounters] = []
    for index, _name, body in _blocks(text, "nvlink -e"):
        try:
            out.extend(_link_counters(index, tuple(body)))
        except _UnexpectedLine as exc:
            raise ParseError(f"nvlink -e GPU {index}: unexpected line {exc.line!r}", exc.line) from None
    return tuple(out)


@memoized(maxsize=128)  # GPU N of every healthy node prints the same block
def _link_counters(index: int, body: tuple[str, ...]) -> tuple[LinkCounters, ...]:
    return tuple(LinkCounters(index, link, *values) for link, values in _counter_values(body))


@memoized(maxsize=128)  # every GPU of a healthy node prints the same block, and so does every node
def _counter_values(body: tuple[str, ...]) -> tuple[tuple[int, tuple[int | None, ...]], ...]:
    """One GPU's ``nvlink -e`` lines -> ((link, (replay, recovery, crc)), ...) by link; () for a GPU whose
    links cannot be listed."""
    if _gpu_state(body):
        return ()
    per_link: dict[int, dict[str, int | None]] = {}
    for line in body:
        m = _COUNTER.match(line)
        if not m:
            raise _UnexpectedLine(line)
        link, name, raw = m.groups()
        kind = _counter_kind(name)
        if kind is None:
            continue
        value = None if raw == "N/A" else int(raw)
        slot = per_link.setdefault(int(link), {})
        prev = slot.get(kind)
        slot[kind] = value if prev is None else prev + (value or 0)
    return tuple((link, tuple(vals.get(k) for k in COUNTERS)) for link, vals in sorted(per_link.items()))


def parse_nvlink(outputs: Mapping[str, CommandResult]) -> NvLinkObservation:
    status = outputs.get(STATUS_ID)
    if status is None:
        raise ParseError(f"{STATUS_ID} output missing")
    text = status.text + ("\n" + status.err_text if status.rc != 0 else "")
    gpus = parse_nvidia_smi_nvlink_s(text)
    if status.rc != 0 and not gpus:
        raise ParseError(f"nvidia-smi nvlink -s failed (rc {status.rc})", text)
    errors = outputs.get(ERRORS_ID)
    read = errors is not None and errors.rc == 0
    counters = parse_nvidia_smi_nvlink_e(errors.text) if read and errors is not None else ()
    return NvLinkObservation(gpus=gpus, counters=counters, counters_read=read)


REMEDY_LINK = ("Reset the GPU (nvidia-smi -r) or reboot and re-check `nvidia-smi nvlink -s`; if the link "
               "stays down or slow, check the kernel log for Xid 74/144-150, reseat the GPU/baseboard, "
               "then RMA")
REMEDY_COUNTERS = ("NVLink errors are accumulating: check the kernel log for Xid 74, run `dcgmi diag -r 3`; "
                   "recurring errors on one link after a reset point at the GPU or baseboard (RMA)")


def _expected_links(ctx: EvalContext) -> int | None:
    exp = ctx.profile.expect("nvlink.links")
    return None if exp is None or exp.value is None else int(exp.value)


def _grade_gpu(gpu: GpuLinks, ctx: EvalContext, speeds: ValueGrades,
               links: ValueGrades) -> list[Finding | Outcome]:
    """One GPU's link findings; its ``nvlink.links`` grade as an outcome, for ``evaluate_nvlink`` to fold."""
    host, comp = ctx.host.name, f"gpu{gpu.index}"
    if gpu.state == "mig":
        return [Finding(host=host, check="nvlink.links", component=comp, status=Status.SKIP, source=STATUS_ID,
                        message=f"{comp}: NVLink cannot be queried in MIG mode")]
    if gpu.state in ("no_nvlink", "all_inactive"):
        what = "reports no NVLink support" if gpu.state == "no_nvlink" else "has all NVLinks inactive"
        return [links.finding(comp, 0, lead=f"{comp} {what}; ")]
    active_speeds = [ln.speed_gbps for ln in gpu.links if ln.active]
    active = len(active_speeds)
    out: list[Finding | Outcome] = [
        Finding(host=host, check="nvlink.link.active", component=f"{comp} link {ln.link}", status=Status.FAIL,
                value="inactive", expected="active", source=STATUS_ID, remedy=REMEDY_LINK,
                message=f"{comp} link {ln.link} is <inactive>")
        for ln in gpu.links if not ln.active] if active < len(gpu.links) else []
    out.append(Outcome(comp, links.grade(active)))  # folded with the other GPUs' where it passes
    if speeds.exp is None or speeds.all_pass(active_speeds):
        return out
    out += [speeds.finding(f"{comp} link {ln.link}", ln.speed_gbps) for ln in gpu.links
            if ln.active and not speeds.passes(ln.speed_gbps)]  # only a link that does not pass is a finding
    return out


def _previous_counters(ctx: EvalContext) -> dict[tuple[int, int], Mapping[str, Any]]:
    prev = ctx.previous.get("nvlink") or {}
    return {(int(c["gpu"]), int(c["link"])): c for c in prev.get("counters") or ()
            if isinstance(c, Mapping) and "gpu" in c and "link" in c}


def _grade_counters(obs: NvLinkObservation, ctx: EvalContext) -> list[Finding]:
    host, previous = ctx.host.name, _previous_counters(ctx)
    out: list[Finding] = []
    for kind in COUNTERS:
        for check, growth in ((f"nvlink.errors.{kind}", False), (f"nvlink.errors.{kind}.growth", True)):
            exp = ctx.profile.expect(check)
            if exp is None or (growth and not previous):
                continue
            grades = ValueGrades(host, check, exp, source=ERRORS_ID, remedy=REMEDY_COUNTERS, profile=ctx.profile)
            if not growth:
                values = [getattr(c, kind) for c in obs.counters]
                if grades.all_pass(values):  # the usual case: no finding per link, one PASS
                    out.append(_counters_pass(host, kind, check, exp, len(values) - values.count(None)))
                    continue
            bad, graded = [], 0
            for c in obs.counters:
                value = getattr(c, kind)
                if value is None:
                    continue
                note = "since driver load"
                if growth:
                    before = previous.get((c.gpu, c.link), {}).get(kind)
                    if before is None:
                        continue
                    value, note = (value - before, "since the previous run") if value >= before else \
                        (value, "since a counter reset after the previous run")
                graded += 1
                if not grades.passes(value):
                    bad.append(grades.finding(f"gpu{c.gpu} link {c.link}", value, detail=f" ({note})"))
            out.extend(bad or [_counters_pass(host, kind, check, exp, graded)])
    return out


def _counters_pass(host: str, kind: str, check: str, exp: Expectation, graded: int) -> Finding:
    return Finding(host=host, check=check, status=Status.PASS, source=ERRORS_ID, value=graded,
                   expected=expected_text(exp), message=f"{kind} errors {expected_text(exp)} on all {graded} links")


def evaluate_nvlink(obs: NvLinkObservation, ctx: EvalContext) -> list[Finding]:
    """Every inactive or slow link, short GPU and counter over threshold; GPUs without NVLink SKIP."""
    host, expected = ctx.host.name, _expected_links(ctx)
    if expected == 0:
        return [Finding(host=host, check="nvlink.links", status=Status.SKIP, source=STATUS_ID,
                        message=f"profile {ctx.profile.name} has no NVLink (nvlink.links == 0)")]
    links = ValueGrades(host, "nvlink.links", ctx.profile.expect("nvlink.links"), source=STATUS_ID,
                        remedy=REMEDY_LINK, profile=ctx.profile)
    if not obs.gpus:
        return [links.finding("node", 0, lead="nvidia-smi nvlink -s listed no GPU; ")]
    speeds = ValueGrades(host, "nvlink.link.speed_gbps", ctx.profile.expect("nvlink.link.speed_gbps"),
                         source=STATUS_ID, remedy=REMEDY_LINK, profile=ctx.profile)
    graded = [f for gpu in obs.gpus for f in _grade_gpu(gpu, ctx, speeds, links)]
    out = [f for f in graded if isinstance(f, Finding)]
    out += fold(host, STATUS_ID, [o for o in graded if isinstance(o, Outcome)], total=len(obs.gpus), noun="GPUs",
                names=_LINK_NAMES)
    if obs.counters_read:
        out.extend(_grade_counters(obs, ctx))
    return out


_LINK_NAMES = {"nvlink.links": "NVLinks active"}


PROBE = register(ProbeSpec(
    name="nvlink",
    description="nvidia-smi nvlink -s/-e: every link active at its generation's rate; error counters, growth",
    command_map={STATUS_ID: "nvidia-smi nvlink -s", ERRORS_ID: "nvidia-smi nvlink -e"},
    command_tools={STATUS_ID: ("nvidia-smi",), ERRORS_ID: ("nvidia-smi",)},
    parse_fn=parse_nvlink,
    evaluate_fn=evaluate_nvlink,
))
