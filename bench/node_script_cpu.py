"""Measure the node-side CPU of the framed per-host script (what one sweep costs each node).

    python bench/node_script_cpu.py --rounds 20                 # this checkout's script
    python bench/node_script_cpu.py --rounds 20 --compare main  # and, interleaved, another revision's

Runs the script ``healthcheck run`` sends to an h100-sxm5-8x node (every built-in probe, that
profile's options) locally with ``sh``, on a fake GPU node: ``nvidia-smi``, ``dcgmi``, ``ibstat``,
``journalctl``, ``systemctl`` and ``ofed_info`` are shims on PATH that print the sample capture's
outputs (inventories/samples/h100-4node, h100-node01); the /proc and /sys readers run for real.
CPU-s per run is user+sys of the whole process tree from ``os.wait4`` (every command and framing
process is reaped into the script's shell). "checkout" is the script as sent (the node's Python
framer where /usr/bin/python3 is 3.8 or later, as here), "checkout-sh" the same script with
``pythons=()``: the sh framer a node without that Python runs. "bare" runs the same command lines
in one shell with no framing, the floor the framing adds to. Every round runs each variant once
(interleaved, so a change of load hits all alike); medians and minimums over the rounds are printed,
and execve counts per script from ``strace -f`` when strace is installed. Nothing here is asserted in tests.
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from healthcheck import probes  # noqa: E402
from healthcheck.core.profiles import load_profile  # noqa: E402
from healthcheck.run.fanout import plan_commands  # noqa: E402
from healthcheck.transport import script as current_script  # noqa: E402
from healthcheck.transport.script import Command, FrameReader, new_marker  # noqa: E402

SAMPLE = ROOT / "inventories" / "samples" / "h100-4node" / "raw" / "h100-node01"
FIXTURES = ROOT / "tests" / "fixtures"

# tool -> [(argv glob, file printed)]; "*" is the fallback
FAKE_TOOLS: dict[str, list[tuple[str, Path]]] = {
    "nvidia-smi": [("-q -x", SAMPLE / "nvidia-smi-q-x.out"), ("topo -m", SAMPLE / "nvidia-smi-topo.out"),
                   ("nvlink -s", SAMPLE / "nvidia-smi-nvlink-s.out"),
                   ("nvlink -e", SAMPLE / "nvidia-smi-nvlink-e.out")],
    "dcgmi": [("discovery -l", SAMPLE / "dcgmi-discovery.out"), ("diag *", SAMPLE / "dcgmi-diag.out"),
              ("health *", SAMPLE / "dcgmi-health.out"),
              ("dmon *", FIXTURES / "dcgmi-dmon" / "h100-8gpu-rest-healthy.txt")],
    "ibstat": [("*", FIXTURES / "ib" / "ibstat-h100-8x-ib-mlx5_3-down-polling.txt")],
    "journalctl": [("*", SAMPLE / "kernel-log.out")],
    "systemctl": [("is-active *", SAMPLE / "fabricmanager-status.out"), ("*", SAMPLE / "systemd-units.out")],
    "ofed_info": [("*", SAMPLE / "ofed-info.out")],
}


def fake_node(bindir: Path) -> None:
    """Shims that print stored outputs chosen by their arguments, first on PATH."""
    bindir.mkdir(parents=True, exist_ok=True)
    for tool, cases in FAKE_TOOLS.items():
        arms = "\n".join(f"  {'*' if glob == '*' else shlex.quote(glob).replace('*', chr(39) + '*' + chr(39))})"
                         f" exec cat {shlex.quote(str(path))};;" for glob, path in cases)
        shim = bindir / tool
        shim.write_text(f"#!/bin/sh\ncase \"$*\" in\n{arms}\n  *) exit 2;;\nesac\n")
        shim.chmod(0o755)


def node_commands(timeout_s: float) -> list[Command]:
    profile = load_profile("h100-sxm5-8x")
    return plan_commands(probes.select(), {"profile": profile}, timeout_s)


def script_builder(rev: str | None) -> Callable[..., str]:
    """``build_script`` of this checkout, or of ``rev`` (loaded from git into a throwaway module)."""
    if rev is None:
        return current_script.build_script
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:healthcheck/transport/script.py"],
                            check=True, capture_output=True, text=True).stdout
    module = types.ModuleType(f"hc_script_at_{rev}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:script.py", "exec"), module.__dict__)
    return module.build_script


def bare_script(commands: Sequence[Command]) -> str:
    return "\n".join(f"( {c.line}\n) </dev/null >/dev/null 2>&1" for c in commands) + "\n"


def run_once(script: str, env: dict[str, str]) -> tuple[float, float, bytes]:
    """(CPU-s of the whole tree, wall s, stdout) of one ``sh -c script``."""
    with tempfile.TemporaryFile() as out:
        start = time.monotonic()
        proc = subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.DEVNULL, env=env)
        _, _, usage = os.wait4(proc.pid, 0)
        proc.returncode = 0
        wall = time.monotonic() - start
        out.seek(0)
        return usage.ru_utime + usage.ru_stime, wall, out.read()


def count_execs(script: str, env: dict[str, str]) -> str:
    """Successful / attempted execve calls of one run (attempts include the PATH search)."""
    if shutil.which("strace") is None:
        return "strace not installed"
    with tempfile.NamedTemporaryFile(suffix=".strace") as trace:
        subprocess.run(["strace", "-f", "-qq", "-e", "trace=execve", "-o", trace.name, "sh", "-c", script],
                       env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False)
        calls = [line for line in Path(trace.name).read_text().splitlines() if "execve(" in line]
    return f"{sum(1 for c in calls if c.rstrip().endswith('= 0'))} execs ({len(calls)} execve attempts)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--compare", metavar="REV", help="also measure the script of this git revision")
    parser.add_argument("--cap", type=int, default=4 << 20)
    args = parser.parse_args()
    commands = node_commands(60.0)
    builders = {"checkout": script_builder(None),
                "checkout-sh": functools.partial(script_builder(None), pythons=())}
    if args.compare:
        builders[args.compare] = script_builder(args.compare)
    cpu: dict[str, list[float]] = {name: [] for name in [*builders, "bare"]}
    wall: dict[str, list[float]] = {name: [] for name in builders}
    with tempfile.TemporaryDirectory() as tmp:
        fake_node(Path(tmp) / "bin")
        env = {**os.environ, "PATH": f"{tmp}/bin:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        for _ in range(args.rounds):
            for name, build in builders.items():
                marker = new_marker()
                used, took, out = run_once(build(commands, marker, args.cap, 5.0), env)
                sections = list(FrameReader("bench", marker).feed(out, 0.0))
                if len(sections) != len(commands):
                    raise SystemExit(f"{name}: framed script returned {len(sections)} of {len(commands)} sections")
                cpu[name].append(used)
                wall[name].append(took)
            cpu["bare"].append(run_once(bare_script(commands), env)[0])
        execs = {name: count_execs(build(commands, new_marker(), args.cap, 5.0), env)
                 for name, build in builders.items()}
        execs["bare"] = count_execs(bare_script(commands), env)
    print(f"{len(commands)} commands; {args.rounds} rounds; load {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs")
    for name, values in cpu.items():
        took = f"; wall median {statistics.median(wall[name]):.2f}s" if name in wall else ""
        print(f"{name:10s} CPU-s per host: min {min(values):.3f}  median {statistics.median(values):.3f}"
              f"{took}; {execs[name]}")


if __name__ == "__main__":
    main()
