"""Launch lines for benchmark jobs: mpirun (Open MPI / HPC-X) and srun argv lists, hostfiles and the
POSIX sh script a launcher host runs (what launchers print when a job fails: ``launcher_errors``).

    settings = LauncherSettings(kind="mpirun", mca={"btl": "tcp,self"})
    argv = mpirun_argv(Program(argv=("hpcc",)), ranks=2, ranks_per_host=1, timeout_s=60, settings=settings)
    # ['mpirun', '--np', '2', '--hostfile', 'hostfile', '--map-by', 'ppr:1:node', '--timeout', '60',
    #  '--mca', 'btl', 'tcp,self', 'hpcc']
    script = launch_script(argv, program, hostfile_text(["10.0.0.1", "10.0.0.2"], 1), settings)

Everything here is pure and builds argv lists; the script ``shlex.quote``s every value, so text
from inventories and profiles is never interpreted by a shell.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from healthcheck.benchmarks import Program

LAUNCHERS = ("mpirun", "srun")
TIMEOUT_EXIT_CODES = (110, 124, 137)  # mpirun --timeout (Open MPI 4), GNU timeout TERM / KILL


@dataclass(frozen=True)
class LauncherSettings:
    """How jobs are launched (profile ``settings.benchmarks.launcher``, overridden by run options).

    ``workdir`` is the parent of each job's scratch directory on the launcher host (default
    ``$TMPDIR``); use a shared filesystem when rank 0 does not run on the launcher host.
    ``host_field`` picks what goes into the hostfile/nodelist: ``address`` (falls back to the
    name) or ``name``. ``env`` is exported for the launcher itself (e.g. ``HWLOC_COMPONENTS``).
    """

    kind: str = "mpirun"
    binary: str | None = None
    args: tuple[str, ...] = ()
    mca: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    allow_run_as_root: bool = False
    map_by: str | None = None
    timeout_flag: bool = True
    workdir: str | None = None
    host_field: str = "address"
    grace_s: float = 60.0

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> LauncherSettings:
        kind = str(raw.get("kind", "mpirun"))
        if kind not in LAUNCHERS:
            raise ValueError(f"unknown launcher {kind!r} (one of {LAUNCHERS})")
        return cls(kind=kind, binary=raw.get("binary"), args=tuple(str(a) for a in raw.get("args", ())),
                   mca={str(k): str(v) for k, v in (raw.get("mca") or {}).items()},
                   env={str(k): str(v) for k, v in (raw.get("env") or {}).items()},
                   allow_run_as_root=bool(raw.get("allow_run_as_root", False)),
                   map_by=raw.get("map_by"), timeout_flag=bool(raw.get("timeout_flag", True)),
                   workdir=raw.get("workdir"), host_field=str(raw.get("host_field", "address")),
                   grace_s=float(raw.get("grace_s", 60.0)))


KIND_SPECIFIC = ("binary", "args", "mca", "map_by", "allow_run_as_root", "timeout_flag")


def merge_launcher_settings(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` (inventory/run options) over ``base`` (the profile's ``benchmarks.launcher``).

    When the override switches ``kind`` (the profiles ship ``mpirun`` with ``args: [--bind-to, none]``,
    a site sets ``kind: srun``), the base's launcher-specific keys (binary, args, mca, map_by,
    allow_run_as_root, timeout_flag) are dropped: srun rejects ``--bind-to`` (found by the real srun
    test). ``env``, ``workdir``, ``host_field`` and ``grace_s`` carry over.
    """
    merged = dict(base)
    if "kind" in override and str(override["kind"]) != str(base.get("kind", "mpirun")):
        for key in KIND_SPECIFIC:
            merged.pop(key, None)
    merged.update(override)
    return merged


def hostfile_text(hosts: Sequence[str], slots: int) -> str:
    """An Open MPI hostfile: one ``host slots=N`` line per node."""
    return "".join(f"{h} slots={int(slots)}\n" for h in hosts)


def mpirun_argv(program: Program, *, ranks: int, ranks_per_host: int, timeout_s: float,
                settings: LauncherSettings, hostfile: str = "hostfile") -> list[str]:
    """``mpirun --np N --hostfile F --map-by ppr:R:node [--timeout T] [--mca k v] [-x K=V] prog``."""
    argv = [settings.binary or "mpirun"]
    if settings.allow_run_as_root:
        argv.append("--allow-run-as-root")
    argv += ["--np", str(ranks), "--hostfile", hostfile,
             "--map-by", settings.map_by or f"ppr:{ranks_per_host}:node"]
    if settings.timeout_flag:
        argv += ["--timeout", str(max(1, int(timeout_s)))]
    for key, value in settings.mca.items():
        argv += ["--mca", key, value]
    for key, value in program.env.items():
        argv += ["-x", f"{key}={value}"]
    return [*argv, *settings.args, *program.argv]


def srun_argv(program: Program, *, nodes: Sequence[str], ranks_per_host: int, timeout_s: float,
              settings: LauncherSettings) -> list[str]:
    """``srun --nodes=N --ntasks-per-node=R --nodelist=a,b --time=M --kill-on-bad-exit=1 prog``.

    The program's environment is exported by the launch script (``--export=ALL`` passes it on):
    NCCL values such as ``NCCL_IB_HCA=mlx5_0:1,mlx5_1:1`` contain commas that ``--export`` would split.
    """
    minutes = max(1, math.ceil(timeout_s / 60))
    return [settings.binary or "srun", f"--nodes={len(nodes)}", f"--ntasks-per-node={ranks_per_host}",
            f"--nodelist={','.join(nodes)}", f"--time={minutes}", "--kill-on-bad-exit=1",
            "--export=ALL", *settings.args, *program.argv]


def launcher_argv(program: Program, *, nodes: Sequence[str], ranks_per_host: int, timeout_s: float,
                  settings: LauncherSettings) -> list[str]:
    if settings.kind == "srun":
        return srun_argv(program, nodes=nodes, ranks_per_host=ranks_per_host, timeout_s=timeout_s,
                         settings=settings)
    if settings.kind == "direct":  # a single-node program run as is on the launcher host (the node)
        return list(program.argv)
    return mpirun_argv(program, ranks=ranks_per_host * len(nodes), ranks_per_host=ranks_per_host,
                       timeout_s=timeout_s, settings=settings)


def launch_script(argv: Sequence[str], program: Program, hostfile: str | None,
                  settings: LauncherSettings) -> str:
    """The POSIX sh script run on the launcher host: scratch dir, input files, launch, outputs.

    It exits with the launcher's exit code; files the program writes (``hpccoutf.txt``) are
    printed after a ``==> name <==`` line so the job's stdout holds every result.
    """
    q = shlex.quote
    base = q(settings.workdir) if settings.workdir else '"${TMPDIR:-/tmp}"'
    lines = ["set -u",
             f"wd=$(mktemp -d {base}/hc-bench.XXXXXX) || "
             "{ echo 'healthcheck: cannot create the job work dir' >&2; exit 97; }",
             "trap 'cd /; rm -rf \"$wd\"' EXIT",
             'cd "$wd" || exit 97']
    files = dict(program.input_files)
    if hostfile is not None and settings.kind == "mpirun":
        files["hostfile"] = hostfile
    for name, content in files.items():
        lines.append(f"printf '%s' {q(content)} > {q(name)}")
    env = dict(settings.env)
    if settings.kind in ("srun", "direct"):
        env.update(program.env)
    lines += [f"export {key}={q(value)}" for key, value in env.items() if _ENV_NAME.match(key)]
    lines += [" ".join(q(a) for a in argv), "rc=$?"]
    for name in program.output_files:
        lines.append(f"if [ -f {q(name)} ]; then printf '\\n==> %s <==\\n' {q(name)}; cat {q(name)}; fi")
    lines.append('exit "$rc"')
    return "\n".join(lines) + "\n"


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
