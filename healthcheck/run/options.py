"""What one run is asked to do, in five typed parts: target, transport, selection, outputs, benchmarks.

    opts = RunOptions(target=TargetOptions(inventory=Path("inventories/example.yaml")),
                      outputs=OutputOptions(out=Path("runs")))
    opts = RunOptions(target=TargetOptions(replay=Path("runs/latest")),
                      outputs=OutputOptions(run_dir=Path("/tmp/regraded")))

The CLI fills these (``cli.options``); ``sweep``, ``node`` and ``merge`` build them directly. Every part
has defaults, so a caller names only what it changes. ``as_manifest`` is how the run records them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from healthcheck.core.defaults import DEFAULTS


@dataclass(frozen=True)
class TargetOptions:
    """Which hosts, with which profiles: exactly one host source (inventory, hostlist, replay, local, rerun)."""

    inventory: Path | None = None
    hostlist: str | None = None           # ad-hoc hosts (ClusterShell nodeset) instead of an inventory
    replay: Path | None = None            # a run directory or capture bundle to re-grade
    local: bool = False                   # this machine only
    rerun_of: Path | None = None          # earlier run dir: sweep only its FAIL/ERROR hosts (run.rerun)
    rerun_checks: bool = False            # with rerun_of: only the probes (and jobs) behind those findings
    limit: Sequence[str] | None = None    # only these host names, nodesets or groups
    profile: str | None = None            # override (or default for bundles without an inventory)
    profile_dirs: Sequence[Path] = ()
    max_hosts: int = DEFAULTS.max_hosts   # an inventory or nodeset expanding to more is a usage error

    @property
    def mode(self) -> str:
        """``replay``, ``local`` or ``ssh`` (any live transport): what the run records as its mode."""
        return "replay" if self.replay is not None else ("local" if self.local else "ssh")


@dataclass(frozen=True)
class TransportOptions:
    """How commands reach the hosts (``transport`` registry names, timeouts, output cap, fan-out)."""

    transport: str | None = None          # override every host's transport (ssh, local, slurm)
    ssh_client: str = "paramiko"          # or "openssh": the system ssh with ControlMaster (docs/ssh.md)
    ssh_config: Path | None = None
    accept_new_host_keys: bool = False
    srun_args: Sequence[str] = ()         # extra srun arguments for slurm (--partition=...)
    slurm_mode: str = "step"              # slurm: "step" (one srun for all hosts) or "per-host" (one srun each)
    slurm_spool: Path | None = None       # step mode: directory shared with the nodes [default: RUN/slurm-step]
    forks: int = DEFAULTS.forks
    timeout_s: float = DEFAULTS.command_timeout_s
    connect_timeout_s: float = DEFAULTS.connect_timeout_s
    deadline_s: float | None = None       # per host; None: from the commands' timeouts
    output_cap_bytes: int = DEFAULTS.output_cap_bytes


@dataclass(frozen=True)
class SelectionOptions:
    """What is checked and against what: probes, their options, the previous run, evidence on failure."""

    probes: Sequence[str] | None = None   # None: every probe
    skip_probes: Sequence[str] = ()
    plan: str = "quick"                   # quick | acceptance: reaches the probes too (DCGM diag level)
    probe_options: Mapping[str, Any] = field(default_factory=dict)
    previous: Path | None = None          # earlier run dir: counters' growth is measured against it
    grade_workers: int | None = None      # replay grading processes (None: DEFAULTS, one per core)
    node_grading: str = ""                # merge: "take" a node's own grading when graded as here, or "regrade"
    collect_evidence: bool = False        # nvidia-bug-report.sh on hosts failing gpu/nvlink/xid (run.evidence)
    evidence_timeout_s: float = DEFAULTS.evidence_timeout_s
    evidence_max_bytes: int = DEFAULTS.evidence_max_bytes


@dataclass(frozen=True)
class OutputOptions:
    """Where the run directory goes and what is written into it."""

    out: Path | None = None               # parent folder: OUT/<UTC timestamp>/ and OUT/latest
    run_dir: Path | None = None           # exactly this folder instead
    render: bool = True                   # False: the caller renders the reports (``healthcheck sweep``)
    metrics_detail: bool = False          # metrics.prom: every check and the per-GPU/link/port series
    junit_full: bool = False              # junit.xml: a testcase per finding, PASS included (else counted)
    progress: bool = False                # live progress on a TTY
    copy_raw: bool = False                # replay: copy the bundle's raw/ instead of referencing it

    @property
    def report_options(self) -> dict[str, bool]:
        """The reports' options (``reports.write_all``)."""
        return {"metrics_detail": self.metrics_detail, "junit_full": self.junit_full}


@dataclass(frozen=True)
class BenchmarkOptions:
    """The benchmark jobs run after the probes (none by default)."""

    benchmarks: Sequence[str] = ()


@dataclass(frozen=True)
class RunOptions:
    """Everything a run needs."""

    target: TargetOptions = field(default_factory=TargetOptions)
    transport: TransportOptions = field(default_factory=TransportOptions)
    selection: SelectionOptions = field(default_factory=SelectionOptions)
    outputs: OutputOptions = field(default_factory=OutputOptions)
    bench: BenchmarkOptions = field(default_factory=BenchmarkOptions)

    @classmethod
    def build(cls, **fields: Any) -> RunOptions:
        """Options from fields named as in the parts (``replay=..., run_dir=..., probes=[...]``), each put
        into its part: how the CLI maps its flags. An unknown name raises ``TypeError``."""
        parts: dict[str, dict[str, Any]] = {part: {} for part in _PARTS}
        for name, value in fields.items():
            part = _PART_OF.get(name)
            if part is None:
                raise TypeError(f"RunOptions has no field {name!r}")
            parts[part][name] = value
        return cls(**{part: _PARTS[part](**values) for part, values in parts.items()})

    def as_manifest(self) -> dict[str, Any]:
        """The options as ``manifest.json`` records them: one object per part, paths as text."""
        return {part: {k: _plain(v) for k, v in asdict(getattr(self, part)).items()} for part in _PARTS}


_PARTS: dict[str, Any] = {"target": TargetOptions, "transport": TransportOptions, "selection": SelectionOptions,
                          "outputs": OutputOptions, "bench": BenchmarkOptions}
_PART_OF = {f.name: part for part, kind in _PARTS.items() for f in fields(kind)}


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
