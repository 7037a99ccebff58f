"""GPU probe: what is wrong with each GPU, from ``nvidia-smi -q -x``, graded against the profile.

    registry.get("gpu").commands({})     # {'nvidia-smi-q-x': 'nvidia-smi -q -x'}
    obs = parse_gpu({"nvidia-smi-q-x": result})
    obs.gpus[0].name, obs.gpus[0].remap.pending      # ('NVIDIA H100 80GB HBM3', False)
    evaluate_gpu(obs, ctx)                           # gpu.count, gpu.row_remap.pending, ...

Sources, in order of preference when a capture bundle holds several: ``nvidia-smi-q-x`` (run
live), text ``nvidia-smi-q`` (nvidia-bug-report logs), the default ``nvidia-smi`` table, and
``nvidia-smi-l`` (``nvidia-smi -L``, count and names only). Local runs use
``probes.nvml.collect_nvml()`` for the same observations. nvidia-smi's own failures (driver not
loaded, GPU lost, InfoROM corrupted, a non-zero exit code) are observations graded FAIL, not
parse errors; output that is neither a report nor a known error raises ``ParseError``.

The xid, fabric and versions probes read the same output (``parse_gpu_sources``) instead of
running nvidia-smi again; parsing is memoized on the output text, so each host's report is
parsed once for all of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from healthcheck.core.model import CommandResult, Status
from healthcheck.core.spec import LocalCollector, ParseError, ProbeSpec
from healthcheck.probes import register
from healthcheck.probes.gpu_eval import evaluate_gpu
from healthcheck.probes.gpu_model import GpuObservation, GpuObservations, observations_from_log
from healthcheck.probes.nvidia_smi_list import parse_nvidia_smi_l, parse_nvidia_smi_table
from healthcheck.probes.nvidia_smi_log import SmiLog, exit_code_error
from healthcheck.probes.nvidia_smi_text import parse_nvidia_smi_q
from healthcheck.probes.nvidia_smi_xml import parse_nvidia_smi_xml
from healthcheck.probes.nvml import local_observations
from healthcheck.probes.parse_memo import shared_parser

GPU_ID = "nvidia-smi-q-x"
COMMANDS = {GPU_ID: "nvidia-smi -q -x"}
COMMAND_TOOLS = {GPU_ID: ("nvidia-smi",)}  # healthcheck/run/nodetools.py
BUNDLE_SOURCES = ("nvidia-smi-q", "nvidia-smi", "nvidia-smi-l")   # read from capture bundles only
PARSERS: dict[str, Callable[[str], SmiLog]] = {
    "nvidia-smi-q-x": parse_nvidia_smi_xml,
    "nvidia-smi-q": parse_nvidia_smi_q,
    "nvidia-smi": parse_nvidia_smi_table,
    "nvidia-smi-l": parse_nvidia_smi_l,
}

__all__ = ["BUNDLE_SOURCES", "COMMANDS", "COMMAND_TOOLS", "GPU_ID", "PARSERS", "GpuObservation", "GpuObservations",
           "evaluate_gpu", "parse_gpu", "parse_gpu_sources", "parse_nvidia_smi_output"]


@shared_parser  # the four probes reading one host's report share its parse
def parse_nvidia_smi_output(command_id: str, text: str, rc: int | None) -> GpuObservations:
    """One nvidia-smi output (stdout and stderr together) -> observations.

    A non-zero exit code with nothing else recognisable becomes an ``exit_code`` error; a zero
    exit code with an unparseable report raises ``ParseError``.
    """
    try:
        log = PARSERS[command_id](text)
    except ParseError:
        error = exit_code_error(rc, text)
        if error is None:
            raise
        return GpuObservations(source=command_id, count=0, errors=(error,))
    obs = observations_from_log(log, command_id)
    if rc not in (None, 0) and not obs.errors:
        error = exit_code_error(rc, text)
        obs = dataclasses.replace(obs, errors=(error,) if error else ())
    if obs.errors and not obs.gpus and obs.count is not None:
        obs = dataclasses.replace(obs, count=0)
    if command_id in ("nvidia-smi-l", "nvidia-smi"):
        obs = dataclasses.replace(obs, partial=True)
    return obs


def parse_gpu(outputs: Mapping[str, CommandResult]) -> GpuObservations:
    """The best source present in ``outputs`` (see the module docstring for the order)."""
    for command_id in PARSERS:
        result = outputs.get(command_id)
        if result is not None:
            return _parse_result(command_id, result.stdout, result.stderr, result.rc)
    raise ParseError(f"no nvidia-smi output among {sorted(outputs)}")


@shared_parser  # on the output's bytes (their hash is kept): the five readers of a host decode it once
def _parse_result(command_id: str, stdout: bytes, stderr: bytes, rc: int | None) -> GpuObservations:
    """``parse_nvidia_smi_output`` of a result's stdout and stderr (``CommandResult.text``/``err_text``)."""
    text = stdout.decode("utf-8", errors="replace") + "\n" + stderr.decode("utf-8", errors="replace")
    return parse_nvidia_smi_output(command_id, text, rc)


def parse_gpu_sources(outputs: Mapping[str, CommandResult]) -> GpuObservations | None:
    """``parse_gpu`` for probes that read GPU facts beside their own commands (xid, fabric,
    versions): None when no nvidia-smi output is among ``outputs``; unparseable output raises
    ``ParseError`` (the gpu probe reports that one as its own ERROR)."""
    if not any(cid in outputs for cid in PARSERS):
        return None
    return parse_gpu(outputs)


PROBE = register(ProbeSpec(
    name="gpu",
    description="nvidia-smi -q -x per GPU: count, model, memory, modes, PCIe, ECC, row remapping, "
                "retired pages, thermals, clock events, power, reset/recovery",
    command_map=COMMANDS,
    command_tools=COMMAND_TOOLS,
    parse_fn=parse_gpu,
    evaluate_fn=evaluate_gpu,
    accepts=BUNDLE_SOURCES,
    missing_tool_status=Status.FAIL,
    collect_local=LocalCollector(local_observations, tool="nvml", what="NVML calls (pynvml)",
                                 fallback="GPUs graded from nvidia-smi -q -x"),
))
