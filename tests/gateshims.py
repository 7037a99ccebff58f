"""Fake GPU tools for ``healthcheck gate`` tests: shell shims that print our fixtures (real layouts, our values).

    shims = GateShims.make(tmp_path)          # bin/ (put first on PATH), profiles/ (HEALTHCHECK_PROFILES_DIR)
    shims.set("gpuperf", "gpuperf/h100-8gpu-torch-gpu3-gemm-32pct-slow.txt")    # what the next run prints
    shims.set("nccl", "hang")                 # sleeps; its pid lands in state/nccl.pid
    shims.set("nccl", "hang", node="node01")  # only under slurmd for SLURMD_NODENAME=node01

Tools: ``nvidia-smi`` (XML for the passive gpu probe), ``nvbandwidth``, ``all_reduce_perf``, ``dcgmi`` and
``node-python`` for the node programs (``gpuperf_node.py``: ``gpuperf`` with GEMM in its tests, ``gpuperf-copy``
otherwise; ``sdc_node.py``: ``sdc``). A fixture's own ``# our own fixture`` header line is not printed. The
profile ``h100-gate-test`` inherits ``h100-sxm5-8x`` and sets small test costs, so every test fits a short
budget, and points the node programs at the python shim.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import FIXTURES

DEFAULTS = {
    "nvidia-smi": "nvidia-smi-xml/h100-8x-healthy.xml",
    "gpuperf": "gpuperf/h100-8gpu-torch-healthy.txt",
    "gpuperf-copy": "gpuperf/h100-8gpu-torch-copy-healthy.txt",
    "sdc": "sdc/h100-8gpu-torch-healthy.txt",
    "nvbandwidth": "nvbandwidth/h100-8gpu-v0.8-h2d-d2h-d2d-healthy.txt",
    "nccl": "nccl-tests/all_reduce-h100-1node-g8-1G-p2p-healthy-465GBs.txt",
    "dcgmi": "dcgmi/diag-r1-j-dcgm4.2-8x-h100-pass.json",
}
PROFILE = "h100-gate-test"

_SHIM = """#!/bin/sh
# test shim: prints the fixture named in the state file (per node under slurmd), or sleeps for "hang"
{pick}
f={state}/"${{SLURMD_NODENAME:-_}}"/"$tool"; [ -e "$f" ] || f={state}/"$tool"
which=$(cat "$f" 2>/dev/null || echo "$default")
echo "$tool $*" >>{state}/calls
case "$which" in
  hang) echo $$ >{state}/"$tool".pid; exec sleep 600;;
  *) exec grep -v '^# our own fixture' {fixtures}/"$which";;
esac
"""


@dataclass
class GateShims:
    base: Path

    @property
    def bin(self) -> Path:
        return self.base / "bin"

    @property
    def state(self) -> Path:
        return self.base / "state"

    @property
    def profiles(self) -> Path:
        return self.base / "profiles"

    @classmethod
    def make(cls, base: Path, costs_s: float = 1.0, timeout_s: float = 6.0,
             costs: dict[str, float] | None = None) -> GateShims:
        shims = cls(base)
        for folder in (shims.bin, shims.state, shims.profiles):
            folder.mkdir(parents=True, exist_ok=True)
        q = shlex.quote
        for name, tool in (("nvidia-smi", "nvidia-smi"), ("nvbandwidth", "nvbandwidth"),
                           ("all_reduce_perf", "nccl"), ("dcgmi", "dcgmi")):
            shims._write(name, f"tool={tool}; default={q(DEFAULTS[tool])}")
        shims._write("node-python", (
            'case "$1" in\n  gpuperf_node.py) case "$*" in *gemm*) tool=gpuperf;; *) tool=gpuperf-copy;; esac;;\n'
            '  *) tool=sdc;;\nesac\n'
            'case "$tool" in gpuperf) default=' + q(DEFAULTS["gpuperf"]) + ';; gpuperf-copy) default='
            + q(DEFAULTS["gpuperf-copy"]) + ';; *) default=' + q(DEFAULTS["sdc"]) + ';; esac'))
        table = "\n".join(f"      {t}: {{cost_s: {(costs or {}).get(t, costs_s)}, per_gpu_s: 0, per_pair_s: 0, "
                          f"timeout_s: {timeout_s}}}" for t in ("gpuperf", "copy", "dcgm_diag", "nccl", "sdc"))
        (shims.profiles / f"{PROFILE}.yaml").write_text(
            f"name: {PROFILE}\ndescription: h100-sxm5-8x with test costs and shims (tests/gateshims.py)\n"
            f"inherits: h100-sxm5-8x\nsettings:\n  gate:\n    costs:\n{table}\n  benchmarks:\n"
            f"    gpuperf: {{python: {shims.bin / 'node-python'}}}\n    sdc: {{python: {shims.bin / 'node-python'}}}\n"
            f"    nccl: {{binary_dir: ''}}\n")
        return shims

    def _write(self, name: str, pick: str) -> None:
        path = self.bin / name
        path.write_text(_SHIM.format(pick=pick, state=shlex.quote(str(self.state)),
                                     fixtures=shlex.quote(str(FIXTURES))))
        path.chmod(0o755)

    def set(self, tool: str, fixture: str, node: str | None = None) -> None:
        folder = self.state / node if node else self.state
        folder.mkdir(parents=True, exist_ok=True)
        (folder / tool).write_text(fixture + "\n")

    def clear(self, tool: str, node: str | None = None) -> None:
        ((self.state / node) if node else self.state).joinpath(tool).unlink(missing_ok=True)

    def calls(self) -> list[str]:
        path = self.state / "calls"
        return path.read_text().splitlines() if path.is_file() else []

    def pid(self, tool: str) -> int | None:
        path = self.state / f"{tool}.pid"
        return int(path.read_text()) if path.is_file() else None
