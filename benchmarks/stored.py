"""Stored benchmark jobs read back from ``raw/_jobs/`` (a run directory or an untrusted bundle).

    outcomes, problems = read_stored_jobs(run_dir, known_hosts=["node01", "node02"])

``raw/_jobs/manifest.json`` says which job each ``<job_id>.out`` was (hosts, shape, timeout,
transport error). Without it (a hand-made bundle, a run killed before the manifest was rewritten) the
job is rebuilt from its id, which names the benchmark, test, shape and hosts
(``nccl-all_reduce_perf-pair-node01-node02``); an id that cannot be resolved is a problem, never a
silently ignored output. ``<job_id>.rc`` is the job's exit code, read like a probe's ``.rc`` (a
missing one reads as 0; a malformed one is a transport error naming the file). Links are never
followed (``healthcheck.store.bundle.read_regular``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from healthcheck import benchmarks
from healthcheck.benchmarks.grade import JobOutcome
from healthcheck.benchmarks.plan import Job
from healthcheck.core.hostnames import host_name_problem
from healthcheck.store.safeio import BundleFileError, read_regular

JOBS_DIR = Path("raw") / "_jobs"
_ID = re.compile(r"^(?P<bench>[a-z]+)-(?P<test>.+?)-(?P<shape>node|pair|rail|cluster|domain|retest)-(?P<rest>.+)$")
_RERUN = re.compile(r"^(?P<count>\d+)nodes-(?P<first>.+?)-without-(?P<without>.+)$")


def _manifest(folder: Path) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Manifest entries by job id, and why the manifest is unusable (None when it is fine or absent)."""
    if not (folder / "manifest.json").exists() and not (folder / "manifest.json").is_symlink():
        return {}, "no raw/_jobs/manifest.json"
    try:
        jobs = json.loads(read_regular(folder / "manifest.json")[0].decode("utf-8")).get("jobs", [])
        entries = {e["job"]["job_id"]: e for e in jobs}
        for entry in entries.values():
            Job.from_json(entry["job"])
    except (BundleFileError, UnicodeDecodeError, ValueError, RecursionError, AttributeError, KeyError,
            TypeError) as exc:
        return {}, f"raw/_jobs/manifest.json unusable ({type(exc).__name__}: {exc})"
    return entries, None


def _split_hosts(text: str, count: int, known: Sequence[str]) -> tuple[str, ...] | None:
    """``a-b`` into ``count`` host names, using the known host names (names may contain '-')."""
    if count == 1:
        return (text,) if text in known or (not known and host_name_problem(text) is None) else None
    for i, char in enumerate(text):
        if char == "-":
            first = _split_hosts(text[:i], 1, known)
            rest = _split_hosts(text[i + 1:], count - 1, known)
            if first and rest:
                return first + rest
    return None


def _cluster_rerun(bench: str, test: str, rest: str, known: Sequence[str]) -> Job | None:
    """``3nodes-first-without-bad1-bad2``: the bundle's hosts but the excluded ones (every host of the
    bundle was in the cluster job it reran)."""
    m = _RERUN.match(rest)
    if m is None:
        return None
    count, first = int(m["count"]), m["first"]
    excluded = _split_hosts(m["without"], len(known) - count, known) if len(known) > count else None
    if excluded is None or first not in known or first in excluded:
        return None
    hosts = (first, *[h for h in known if h != first and h not in excluded])
    return Job(job_id=f"{bench}-{test}-retest-{rest}", benchmark=bench, test=test, shape="cluster", hosts=hosts,
               ranks_per_host=0, retest_of="(unknown)", excluded=excluded)


def job_from_id(job_id: str, known: Sequence[str]) -> Job | None:
    """The job an id names (see ``plan.job_id``), or None when it cannot be resolved."""
    m = _ID.match(job_id)
    if m is None or m["bench"] not in {spec.name for spec in benchmarks.all_benchmarks()}:
        return None
    if m["shape"] == "retest" and _RERUN.match(m["rest"]):
        return _cluster_rerun(m["bench"], m["test"], m["rest"], known)
    shape, rest, rail = m["shape"], m["rest"], None
    if shape == "rail":
        rail, _, rest = rest.partition("-")
    if shape in ("cluster", "domain"):  # without a manifest: only a job over every host of the bundle
        count, _, first = rest.partition("nodes-")
        hosts = tuple([first, *[h for h in known if h != first]]) if count.isdecimal() and first in known \
            and int(count) == len(known) else None
    else:
        hosts = _split_hosts(rest, 1 if shape == "node" else 2, known)
    if hosts is None:
        return None
    return Job(job_id=job_id, benchmark=m["bench"], test=m["test"], shape="pair" if shape == "retest" else shape,
               hosts=hosts, ranks_per_host=0, rail=rail, retest_of="(unknown)" if shape == "retest" else None)


def _rc(folder: Path, job_id: str, default: Any) -> tuple[int | None, str | None]:
    path = folder / f"{job_id}.rc"
    if not path.exists() and not path.is_symlink():
        return (default if isinstance(default, int) or default is None else None), None
    try:
        text = read_regular(path, 64)[0].decode("utf-8", errors="replace").strip()
    except BundleFileError as exc:
        return None, f"refused raw/_jobs/{job_id}.rc: {exc}"
    if text == "" and default is None:
        return None, None
    if text.lstrip("-").isdecimal() and len(text) <= 11:
        return int(text), None
    return None, f"malformed raw/_jobs/{job_id}.rc: {text[:40]!r} is not an exit code"


def read_stored_jobs(run_dir: Path, known_hosts: Sequence[str] = ()) -> tuple[list[JobOutcome], list[str]]:
    """Every stored job in execution order (manifest order, then the unlisted ones by id), and
    the problems that kept outputs from being graded."""
    folder = Path(run_dir) / JOBS_DIR
    if not folder.is_dir() or folder.is_symlink():
        return [], []
    entries, problem = _manifest(folder)
    stems = sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".out"))
    problems: list[str] = []
    outcomes: list[JobOutcome] = []
    for job_id in [*entries, *[s for s in stems if s not in entries]]:
        entry = entries.get(job_id, {})
        job = Job.from_json(entry["job"]) if entry else job_from_id(job_id, known_hosts)
        if job is None:
            problems.append(f"raw/_jobs/{job_id}.out not graded: {problem or 'not in the manifest'}, and its id "
                            "does not name a known benchmark and the bundle's hosts")
            continue
        texts, error = {}, entry.get("transport_error")
        for suffix in (".out", ".err"):
            try:
                data = read_regular(folder / f"{job_id}{suffix}")[0] if (folder / f"{job_id}{suffix}").exists() \
                    or (folder / f"{job_id}{suffix}").is_symlink() else b""
            except BundleFileError as exc:
                data, error = b"", f"refused raw/_jobs/{job_id}{suffix}: {exc}"
            texts[suffix] = data.decode("utf-8", errors="replace")
        rc, bad_rc = _rc(folder, job_id, entry.get("rc") if entry else 0)
        outcomes.append(JobOutcome(job=job, launcher=str(entry.get("launcher", "")),
                                   command=str(entry.get("command", "")), rc=rc,
                                   timed_out=bool(entry.get("timed_out")), transport_error=error or bad_rc,
                                   duration_s=float(entry.get("duration_s") or 0.0),
                                   stdout=texts[".out"], stderr=texts[".err"]))
    return outcomes, problems
