"""Node-local mode: check this node only, write its bundle into a spool directory, NHC-style verdict.

    outcome = run_node(NodeOptions(spool=Path("/var/spool/healthcheck"), budget_s=10, profile="h100-sxm5-8x"))
    outcome.bundle            # /var/spool/healthcheck/<host>/ (a run directory: manifest, raw/<host>/, results)
    outcome.exit_code         # 0 healthy, 1 a FAIL or ERROR (first one in outcome.first_failure)

The bundle is built beside its final place (``.<host>.tmp-<pid>-*``) and swapped in with renames, so a
reader (``healthcheck merge``, a textfile collector) sees the previous complete bundle or the new one,
never a half-written one; runs swapping at the same moment (an Epilog beside the HealthCheckProgram) all
succeed, the last one wins. Nothing is deleted that a run did not write: an ``OUT/<host>`` that is not a
healthcheck bundle is refused before anything runs (``NodeSpoolError``), and a bundle that cannot be
written (disk full) leaves the previous one in place, saying so. ``--prom`` is written after the bundle
is in place: a failure there is reported (``prom_error``) and loses nothing else. ``--budget`` keeps
only job-safe probes whose declared cost fits (``healthcheck.ops.budget``). Self-drain under Slurm is
``healthcheck.ops.selfdrain``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import platform
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healthcheck import probes as probe_registry
from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Finding, Status
from healthcheck.ops.budget import load_costs, select_within_budget
from healthcheck.ops.drain import DrainPolicy, triggers
from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions, TransportOptions
from healthcheck.run.selection import SelectionError
from healthcheck.store.results import RunResults
from healthcheck.store.rundir import RunDirError, _safe_component
from healthcheck.store.safeio import read_regular

UNHEALTHY = DrainPolicy(statuses=frozenset({Status.FAIL, Status.ERROR}))  # what makes the exit code 1
STALE_AFTER_S = 900.0
SWAP_ATTEMPTS = 1000   # each failed attempt means another run's bundle landed meanwhile


class NodeSpoolError(RunDirError):
    """The spool holds something at ``OUT/<host>`` that a run did not write: never replaced (exit 2)."""


@dataclass
class NodeOptions:
    spool: Path                               # the bundle goes to spool/<host>/
    host: str | None = None                   # [default: $SLURMD_NODENAME, else the short host name]
    inventory: Path | None = None             # this host's entry gives its profile and vars
    profile: str | None = None
    probes: Sequence[str] | None = None
    skip_probes: Sequence[str] = ()
    budget_s: float | None = None             # only job-safe probes whose declared cost fits
    timeout_s: float = DEFAULTS.command_timeout_s
    probe_options: Mapping[str, Any] = field(default_factory=dict)
    prom_file: Path | None = None             # node_exporter textfile-collector file, written atomically


@dataclass
class NodeOutcome:
    host: str
    bundle: Path
    results: RunResults
    left_out: dict[str, str]                  # probes not run because of --budget, and why
    prom_error: str | None = None             # --prom could not be written (the bundle is in place)

    @property
    def findings(self) -> list[Finding]:
        result = self.results.hosts.get(self.host)
        return list(result.findings) if result else []

    @property
    def first_failure(self) -> Finding | None:
        """The first FAIL in report order, else the first ERROR, of the findings that count by the drain
        rule (``UNHEALTHY``: never an observe-only or advisory check, never a WARN): the one line NHC
        would print."""
        counted = [f for f in self.findings if triggers(f, UNHEALTHY)]
        for status in (Status.FAIL, Status.ERROR):
            for f in counted:
                if f.status is status:
                    return f
        return None

    @property
    def exit_code(self) -> int:
        return 1 if self.first_failure is not None or not self.findings else 0


def node_name(explicit: str | None = None, environ: Mapping[str, str] = os.environ) -> str:
    """This node's name: ``explicit``, else ``$SLURMD_NODENAME`` (set by slurmd for its scripts and
    steps), else the short host name."""
    return explicit or environ.get("SLURMD_NODENAME") or (platform.node() or "localhost").split(".")[0]


def plan_probes(opts: NodeOptions) -> tuple[list[str], dict[str, str]]:
    """Probe names to run and those left out by the budget (with why)."""
    selected = probe_registry.select(opts.probes, opts.skip_probes)
    if opts.budget_s is None:
        return [p.name for p in selected], {}
    chosen, left_out = select_within_budget(selected, load_costs(), opts.budget_s)
    return [p.name for p in chosen], left_out


def run_node(opts: NodeOptions) -> NodeOutcome:
    """Check this node, write ``spool/<host>/`` and, when asked, the textfile-collector file."""
    host = _safe_component(node_name(opts.host))
    names, left_out = plan_probes(opts)
    if not names:
        raise ValueError("no probe left to run: " + "; ".join(f"{n}: {why}" for n, why in left_out.items()))
    spool = Path(opts.spool)
    spool.mkdir(parents=True, exist_ok=True)
    final = spool / host
    refuse_foreign(final)  # before anything runs: a user's folder there is never touched
    remove_stale(spool, host)
    holder = Path(tempfile.mkdtemp(prefix=f".{host}.tmp-{os.getpid()}-", dir=spool))  # staging/<host>
    staging = holder / host
    timeout_s = opts.timeout_s if opts.budget_s is None else min(opts.timeout_s, max(1.0, opts.budget_s))
    deadline_s = None if opts.budget_s is None else 2 * opts.budget_s + DEFAULTS.kill_after_s
    run_opts = RunOptions(
        target=TargetOptions(inventory=opts.inventory, hostlist=None if opts.inventory else host,
                             limit=[host] if opts.inventory else None, local=True, profile=opts.profile),
        outputs=OutputOptions(run_dir=staging, render=False),
        transport=TransportOptions(forks=1, timeout_s=timeout_s, deadline_s=deadline_s),
        selection=SelectionOptions(probes=names, probe_options={
            "kernel_log_window_h": DEFAULTS.kernel_log_window_h, "plan": "quick", **opts.probe_options}))
    try:
        try:
            outcome = execute_run(run_opts)
            if host in outcome.results.hosts and opts.prom_file is not None:
                render_metrics(staging)
        except SelectionError as exc:  # --limit of one host: say it the node-mode way
            raise RunDirError(f"host {host} is not in inventory {opts.inventory} (give --host or add it)") from exc
        except (OSError, RunDirError) as exc:
            raise _unwritable(exc, host, spool, final) from exc
        if host not in outcome.results.hosts:
            raise RunDirError(f"host {host} is not in inventory {opts.inventory} (give --host or add it)")
        bundle = swap_in(staging, final)
    finally:
        shutil.rmtree(holder, ignore_errors=True)
    prom_error = None
    if opts.prom_file is not None:
        prom_error = publish_textfile(bundle / "metrics.prom", Path(opts.prom_file))
    return NodeOutcome(host=host, bundle=bundle, results=outcome.results, left_out=left_out, prom_error=prom_error)


def _unwritable(exc: OSError | RunDirError, host: str, spool: Path, final: Path) -> Exception:
    """A bundle that could not be written (disk full, quota), said with paths that still exist afterwards
    (the staging folder is removed); any other ``RunDirError`` unchanged."""
    cause = exc if isinstance(exc, OSError) else exc.__cause__
    if not isinstance(cause, OSError):
        return exc
    kept = f"{final} (the previous bundle) is kept" if os.path.lexists(final) else "no bundle was written"
    return RunDirError(f"cannot write the bundle of {host} in {spool}: {cause.strerror or cause}; nothing was "
                       f"changed: {kept}; free space in {spool} and run again")


def is_node_bundle(path: Path) -> bool | None:
    """True for a folder (not a link) holding a ``raw/`` folder and a ``manifest.json`` written by
    healthcheck, None when nothing is there, else False. Read through one open descriptor: a bundle that
    another run swaps away meanwhile is still judged as the folder it was."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError:  # a link, a file
        return False
    try:
        if not stat.S_ISDIR(os.stat("raw", dir_fd=fd, follow_symlinks=False).st_mode):
            return False
        manifest = json.loads(read_regular("manifest.json", 1 << 20, dir_fd=fd)[0])
    except (OSError, ValueError, RecursionError):
        return False if _still_at(path, fd) else None  # swapped away and removed while read: gone, not foreign
    finally:
        os.close(fd)
    return isinstance(manifest, dict) and "healthcheck_version" in manifest


def _still_at(path: Path, fd: int) -> bool:
    """Whether the folder open as ``fd`` is still the one at ``path``."""
    try:
        here, there = os.stat(path, follow_symlinks=False), os.fstat(fd)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def refuse_foreign(final: Path) -> None:
    """Raise ``NodeSpoolError`` when ``final`` exists and is not a bundle a run wrote."""
    if is_node_bundle(final) is False:
        raise NodeSpoolError(f"{final} exists and is not a healthcheck bundle (a folder with raw/ and a "
                             "manifest.json written by healthcheck): left untouched; move it away or give "
                             "another --out")


def remove_stale(spool: Path, host: str, max_age_s: float = STALE_AFTER_S) -> list[Path]:
    """Remove this host's staging folders left by runs that were killed (slurmd kills a
    HealthCheckProgram after 60 s); younger ones may belong to a run in flight (an Epilog beside it)."""
    removed = []
    now = time.time()
    for entry in spool.glob(f".{host}.*"):
        if entry.name.startswith((f".{host}.tmp-", f".{host}.old-")) and not entry.is_symlink() \
                and now - entry.lstat().st_mtime > max_age_s:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def swap_in(staging: Path, final: Path) -> Path:
    """Put the bundle ``staging`` at ``final``: the previous bundle is parked aside with one rename, the
    new one renamed in, the parked one removed. A run swapping at the same moment may land its bundle in
    between: it is parked too and this one lands after it (the last one wins, no run fails). Something at
    ``final`` that is not a bundle is never moved (``NodeSpoolError``)."""
    parked: list[Path] = []
    try:
        for attempt in range(SWAP_ATTEMPTS):
            refuse_foreign(final)
            old = final.with_name(f".{final.name}.old-{os.getpid()}-{threading.get_ident()}-{attempt}")
            try:
                os.rename(final, old)
                parked.append(old)
            except FileNotFoundError:
                pass  # no bundle yet, or another run parked it just now
            try:
                os.rename(staging, final)
                return final
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
        raise RunDirError(f"{final}: not replaced after {SWAP_ATTEMPTS} attempts (other runs kept replacing it)")
    finally:
        for old in parked:
            shutil.rmtree(old, ignore_errors=True)


def render_metrics(run_dir: Path) -> Path:
    """metrics.prom of the run, written into the run directory (part of the bundle)."""
    from healthcheck import reports

    (source,) = reports.write_all(run_dir, ["prometheus"])
    return source


def publish_textfile(source: Path, target: Path) -> str | None:
    """Copy ``source`` to ``target`` atomically (temp file in the same folder + rename), as node_exporter's
    textfile collector requires (it must never read a partial file). Returns why it failed, or None."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, tmp)
        tmp.chmod(0o644)
        tmp.replace(target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return f"{target}: {exc.strerror or exc}"
    return None


def finding_line(f: Finding) -> str:
    """One line per non-PASS finding: status, check, component, message (newlines from node output folded)."""
    where = "" if f.component in ("", "node") else f" {f.component}"
    return f"{f.status.value:<5} {f.check}{where}: {' '.join(f.message.split())}"
