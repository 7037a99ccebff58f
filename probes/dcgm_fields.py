"""DCGM field probe: sample GPU fields for a few seconds at rest (``dcgmi dmon``) and grade them.

    registry.get("dcgm_fields").commands({})["dcgmi-dmon"]   # sh: dcgmi dmon -e 150,140,... -c 5 -d 1000
    obs = parse_dcgm_fields({"dcgmi-dmon": result})          # FieldsObservation(source="dcgmi-dmon", gpus=...)
    evaluate_dcgm_fields(obs, ctx)                           # dcgm_fields.gpu_temp_c, ...clock_event.hw_slowdown

One command, ``dcgmi-dmon``, runs ``sampler_script``: ``dcgmi dmon -e IDS -c N -d MS`` when dcgmi is
installed and nv-hostengine answers, else a loop of ``nvidia-smi --query-gpu=... --format=csv`` for
the same quantities (no XID, PCIe replay or NVLink counters there), else a ``none`` marker that
becomes SKIP with the reason. Options: ``dcgm_field_ids`` (list or comma string; default
``DEFAULT_FIELD_IDS``), ``dcgm_fields_samples`` (5) and ``dcgm_fields_interval_ms`` (1000). The
same script, with a stop file, samples under benchmark load (``healthcheck/run/telemetry.py``).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.spec import EvalContext, ParseError, ProbeSpec
from healthcheck.probes import register
from healthcheck.probes.dcgm import dcgm_unavailable
from healthcheck.probes.dcgm_fields_eval import GpuSummary, evaluate_summaries, summarize, window_s
from healthcheck.probes.dmon_parse import (
    DEFAULT_FIELD_IDS,
    QUERY_GPU,
    QUERY_GPU_PRE535,
    SAMPLER_MARK,
    FieldTable,
    parse_field_samples,
    parse_nvidia_smi_dmon,
)

COMMAND_ID = "dcgmi-dmon"
SAMPLES, INTERVAL_MS = 5, 1000
_NO_TOOL = "neither dcgmi (with a reachable nv-hostengine) nor nvidia-smi is installed on this node"


def field_ids(raw: Any) -> tuple[int, ...]:
    """Field ids from an option or profile setting (list or ``"150,155"``); unknown ids are kept."""
    if raw in (None, "", ()):
        return DEFAULT_FIELD_IDS
    items = raw.split(",") if isinstance(raw, str) else raw
    ids = tuple(int(str(i).strip()) for i in items if str(i).strip())
    if not ids or any(i <= 0 for i in ids):
        raise ValueError(f"DCGM field ids must be positive integers, got {raw!r}")
    return ids


def sampler_script(ids: Sequence[int], count: int, interval_ms: int, stop_file: str | None = None) -> str:
    """The sh that samples ``count`` rounds every ``interval_ms`` (dcgmi, else nvidia-smi, else none).

    With ``stop_file`` the sampling ends early once that file exists (touched when a benchmark job
    ends): dcgmi runs in the background and is sent SIGTERM, the nvidia-smi loop checks between
    rounds; ``healthcheck-sampler: stopped`` is printed then.
    """
    ids_text = ",".join(str(int(i)) for i in ids)
    head = f"{SAMPLER_MARK} %s interval_ms={int(interval_ms)} count={int(count)}"
    dmon = f"dcgmi dmon -e {ids_text} -c {int(count)} -d {int(interval_ms)}"
    sleep = f"{interval_ms / 1000:g}"
    until_stop = ' && [ ! -e "$hc_f" ]' if stop_file else ""
    smi_loop = (f"i=0; while [ $i -lt {int(count)} ]{until_stop}; do "
                "nvidia-smi --query-gpu=$q --format=csv || { hc_rc=$?; break; }; i=$((i+1)); "
                f"if [ $i -lt {int(count)} ]; then sleep {sleep}; fi; done")
    lines = [f"hc_f={shlex.quote(stop_file)}" if stop_file else ":",
             "if command -v dcgmi >/dev/null 2>&1 && dcgmi discovery -l >/dev/null 2>&1; then",
             f"  echo '{head % 'dcgmi'}'"]
    if stop_file:
        lines += [f'  {{ {dmon} & echo $! >"$hc_f.pid"; wait $!; : >"$hc_f.done"; }} &',
                  "  hc_k=; while [ ! -e \"$hc_f.done\" ]; do",
                  "    if [ -z \"$hc_k\" ] && [ -e \"$hc_f\" ] && [ -s \"$hc_f.pid\" ]; then "
                  "kill \"$(cat \"$hc_f.pid\")\" 2>/dev/null; hc_k=1; fi; sleep 0.2; done; wait"]
    else:
        lines.append(f"  {dmon}; exit $?")
    why = "$(command -v dcgmi >/dev/null 2>&1 && echo hostengine-unreachable || echo dcgmi-absent)"
    lines += ["elif command -v nvidia-smi >/dev/null 2>&1; then",
              f"  echo \"{head % 'nvidia-smi'} why={why}\"",
              f"  q={QUERY_GPU}; nvidia-smi --query-gpu=$q --format=csv >/dev/null 2>&1 || q={QUERY_GPU_PRE535}",
              f"  {smi_loop}",
              "else", f"  echo '{SAMPLER_MARK} none {_NO_TOOL}'", "fi"]
    if stop_file:  # no stop yet: leave a ".finished" note so the late stop command cleans up after itself
        lines += [f"if [ -e \"$hc_f\" ]; then echo '{SAMPLER_MARK} stopped'; rm -f \"$hc_f\"; "
                  "else : >\"$hc_f.finished\"; fi",
                  "rm -f \"$hc_f.pid\" \"$hc_f.done\""]
    return "\n".join([*lines, 'exit "${hc_rc:-0}"']) + "\n"


def stop_command(stop_file: str) -> str:
    """Ends a ``sampler_script(..., stop_file)`` run (or, when it already ended, removes its traces)."""
    f = shlex.quote(stop_file)
    return f": > {f}; if [ -e {f}.finished ]; then rm -f {f} {f}.finished; fi"


def at_rest_plan(options: Mapping[str, Any]) -> tuple[tuple[int, ...], int, int]:
    """(field ids, samples, interval ms): run options win; else the host profile's
    ``settings.dcgm_fields`` (ids, interval_ms, samples); else the defaults."""
    profile = options.get("profile")
    settings = profile.setting("dcgm_fields", {}) if hasattr(profile, "setting") else {}
    ids = field_ids(options.get("dcgm_field_ids") or settings.get("ids"))
    count = int(options.get("dcgm_fields_samples", settings.get("samples", SAMPLES)))
    interval = int(options.get("dcgm_fields_interval_ms", settings.get("interval_ms", INTERVAL_MS)))
    if count < 1 or interval < 100:
        raise ValueError(f"dcgm_fields_samples must be >= 1 and dcgm_fields_interval_ms >= 100 "
                         f"(got {count}, {interval})")
    return ids, count, interval


def render_commands(options: Mapping[str, Any]) -> dict[str, str]:
    ids, count, interval = at_rest_plan(options)
    return {COMMAND_ID: sampler_script(ids, count, interval)}


def command_timeouts(options: Mapping[str, Any]) -> dict[str, float]:
    """60 s, or the planned sampling window plus 30 s of start-up when a profile asks for a longer one
    (a fixed 60 s would kill a 30 x 2 s window and turn it into an ERROR)."""
    _, count, interval = at_rest_plan(options)
    return {COMMAND_ID: max(60.0, count * interval / 1000.0 + 30.0)}


@dataclass(frozen=True)
class FieldsObservation:
    """Per-GPU summaries of one sampling window (``unavailable``: why nothing was sampled)."""

    source: str
    interval_s: float | None
    rounds: int
    window_s: float
    quantities: tuple[str, ...]
    gpus: tuple[GpuSummary, ...]
    truncated: bool = False
    notes: tuple[str, ...] = ()
    unavailable: str | None = None


def observe(table: FieldTable) -> FieldsObservation:
    return FieldsObservation(source=table.source, interval_s=table.interval_s, rounds=table.rounds(),
                             window_s=round(window_s(table), 3), quantities=table.quantities,
                             gpus=summarize(table), truncated=table.truncated, notes=table.notes,
                             unavailable=table.unavailable)


def parse_result(result: CommandResult) -> FieldTable:
    """One sampler output (``dcgmi-dmon``, or a plain ``nvidia-smi-dmon`` capture) -> FieldTable."""
    text = result.text
    if SAMPLER_MARK not in text and (why := dcgm_unavailable(result)) is not None:
        return FieldTable("none", (), (), unavailable=why)
    table = parse_nvidia_smi_dmon(text) if result.command_id == "nvidia-smi-dmon" else parse_field_samples(text)
    if not table.samples and table.unavailable is None:
        first = (text + result.err_text).strip().splitlines()[-1:] or [""]
        raise ParseError(f"no samples (exit code {result.rc}): {first[0][:200]}", text)
    return table


def parse_dcgm_fields(outputs: Mapping[str, CommandResult]) -> FieldsObservation:
    for cid in (COMMAND_ID, "nvidia-smi-dmon"):
        if cid in outputs:
            return observe(parse_result(outputs[cid]))
    raise ParseError(f"no dcgmi-dmon output among {sorted(outputs)}")


def unavailable_finding(host: str, check: str, source: str, why: str) -> Finding:
    return Finding(host=host, check=check, status=Status.SKIP, source=source, message=f"{check} skipped: {why}",
                   remedy="Install DCGM (datacenter-gpu-manager, nvidia-dcgm.service) to sample GPU fields")


def evaluate_dcgm_fields(obs: FieldsObservation, ctx: EvalContext) -> list[Finding]:
    host = ctx.host.name
    if obs.unavailable is not None:
        return [unavailable_finding(host, "dcgm_fields.sampler", COMMAND_ID, obs.unavailable)]
    where = f"at rest ({obs.rounds} samples over {obs.window_s:g} s, {obs.source})"
    findings = evaluate_summaries(host, obs.gpus, ctx.profile, prefix="dcgm_fields", source=COMMAND_ID,
                                  where=where, window=obs.window_s)
    if not obs.gpus:
        findings.insert(0, Finding(host=host, check="dcgm_fields.sampler", status=Status.ERROR, source=COMMAND_ID,
                                   message=f"{obs.source} returned no GPU rows ({'; '.join(obs.notes) or 'empty'})",
                                   remedy="Run the sampler by hand on the node (raw/<host>/dcgmi-dmon.out)"))
    return findings


PROBE = register(ProbeSpec(
    name="dcgm_fields",
    description="DCGM fields sampled for a few seconds at rest (dcgmi dmon, nvidia-smi fallback): temperatures, "
                "power, SM clock, clock event reasons, violations, XID, ECC, row remap, PCIe/NVLink counters",
    command_map=render_commands({}),
    render_commands=render_commands,
    parse_fn=parse_dcgm_fields,
    evaluate_fn=evaluate_dcgm_fields,
    accepts=("nvidia-smi-dmon",),
    command_timeouts=command_timeouts,
    command_tools={COMMAND_ID: ("dcgmi", "nvidia-smi")},  # dcgmi dmon, else the nvidia-smi sampler
))

__all__ = ["COMMAND_ID", "FieldsObservation", "evaluate_dcgm_fields", "field_ids", "parse_dcgm_fields",
           "sampler_script", "stop_command"]
