"""DCGM multi-node diagnostics (``dcgmi mndiag``, the mnubergemm stress workload): DCGM's own verdict per host
and per GPU across a GB200/GB300 NVL domain.

    healthcheck run -i rack07.yaml --benchmarks mndiag     # one job: dcgmi mndiag on the first tray, all trays listed
    result = parse_mndiag(text)
    result.status, result.hosts[3].hostname, result.results[13]
    # "Fail", "r07t04", MndiagEntity(host_id=3, group="GPU", entity_id=1, status="Fail", errors=(...))

``dcgmi mndiag --json`` output of DCGM 4.3-4.6 (NVIDIA/DCGM ``dcgmi/MnDiag.cpp`` ``HelperJsonBuildOutput``,
key names from ``nvvs/include/NvvsJsonStrings.h``, schema ``testing/python3/dcgm_mndiag_schema.json``;
docs.nvidia.com/datacenter/dcgm/latest/reference/command-line-reference/dcgmi/dcgmi-mndiag.html)::

    {"DCGM Diagnostic": "DCGM Multi-Node Diagnostic", "metadata": {"num_hosts": 18, "num_entities": 72},
     "hosts": [{"host_id": 0, "hostname": "r07t01", "dcgm_version": ..., "driver_version": ..., "entities": [...]}],
     "test_categories": [{"category": "Multi-Node Tests", "tests": [{"name": "mnubergemm", "status": "Fail",
        "results": [{"host_id": 3, "entity_group": "GPU", "entity_id": 1, "status": "Fail",
                     "warnings": [{"warning": "...", "error_id": 1, "error_category": 15, "error_severity": 4}]}],
        "mpi_error": {"warning": "Error: ...", "error_category": "MPI"}}]}],      (a failure with no GPU error)
     "global_errors": [...], "runtime_error": "..."}                              (the diagnostic did not run)

Grading (pure): per inventory host, the worst of its GPUs' results against the profile's ``mndiag.result``
(``Pass``); each failing GPU named with DCGM's error text; a host of the job that mndiag did not report is
ERROR (not tested); a run that failed without a GPU error (MPI, setup) or did not run is ERROR, never a verdict.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.benchmarks import BenchContext, BenchmarkSpec, Program, bench_setting, register
from healthcheck.benchmarks.domain import host_of
from healthcheck.benchmarks.mndiag_text import parse_mndiag_table
from healthcheck.core.grading import finding_from_expectation
from healthcheck.core.model import Finding, Status
from healthcheck.core.profiles import Profile
from healthcheck.core.spec import ParseError

NAME = "DCGM Multi-Node Diagnostic"
STATUSES = ("Pass", "Fail", "Warn", "Skip", "Not Run")
_RANK = {"Pass": 0, "Skip": 1, "Not Run": 1, "Warn": 2, "Fail": 3}
REMEDY = {
    "gpu": "mnubergemm failed on this GPU under multi-node load: read DCGM's error (a CUDA error points at the GPU or "
           "its NVLink, an IMEX error at the IMEX domain: imex findings), run dcgmi diag -r 3 on the tray, check its "
           "fabric findings, then reset the GPU or drain the tray",
    "run": "dcgmi mndiag did not produce a verdict: check the head node's nv-hostengine, that every tray runs a "
           "compatible DCGM host engine (port 5555), noninteractive SSH and Open MPI for the host-engine's service "
           "account, and IMEX (docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-multinode-diagnostics.html)",
    "missing": "dcgmi mndiag did not report this tray: check that it was in --hostList and that its host engine "
               "answered",
}


@dataclass(frozen=True)
class MndiagError:
    text: str
    error_id: int | None = None
    category: Any = None
    host_id: int | None = None


@dataclass(frozen=True)
class MndiagHost:
    host_id: int
    hostname: str
    dcgm_version: str | None
    driver_version: str | None
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class MndiagEntity:
    """One entity's result (a GPU of a host): ``status`` is one of ``STATUSES``."""

    host_id: int
    group: str
    entity_id: int
    status: str
    errors: tuple[MndiagError, ...] = ()
    info: tuple[str, ...] = ()


@dataclass(frozen=True)
class MndiagResult:
    test: str | None
    status: str | None                   # the overall result; None when the diagnostic did not run
    num_hosts: int
    hosts: tuple[MndiagHost, ...]
    results: tuple[MndiagEntity, ...]
    global_errors: tuple[MndiagError, ...] = ()
    mpi_error: str | None = None
    runtime_error: str | None = None

    def hostname(self, host_id: int) -> str | None:
        return next((h.hostname for h in self.hosts if h.host_id == host_id), None)


def _document(text: str) -> Mapping[str, Any]:
    start = text.find("{")
    while start != -1:
        try:
            doc, _ = json.JSONDecoder().raw_decode(text, start)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and (doc.get("DCGM Diagnostic") == NAME or NAME in doc):
            return doc
        start = text.find("{", start + 1)
    raise ParseError(f"no '{NAME}' JSON document (dcgmi mndiag --json)", text[:300])


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParseError(f"mndiag: {where} is not an integer: {value!r}", str(value)[:80])
    return value


def _status(value: Any, where: str) -> str:
    if value not in STATUSES:
        raise ParseError(f"mndiag: {where} status {value!r} is none of {', '.join(STATUSES)}", str(value)[:80])
    return str(value)


def _errors(items: Any, where: str) -> tuple[MndiagError, ...]:
    if items is None:
        return ()
    if not isinstance(items, list) or not all(isinstance(e, dict) for e in items):
        raise ParseError(f"mndiag: {where} is not a list of objects", str(items)[:80])
    return tuple(MndiagError(str(e.get("warning", ""))[:500], e.get("error_id") if isinstance(e.get("error_id"), int)
                             else None, e.get("error_category"),
                             e.get("host_id") if isinstance(e.get("host_id"), int) else None) for e in items)


def _texts(value: Any) -> tuple[str, ...]:
    return tuple(str(i)[:300] for i in value) if isinstance(value, list) else ()


def _list(doc: Mapping[str, Any], key: str) -> list[Any]:
    value = doc.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ParseError(f"mndiag: {key!r} is not a list of objects", str(value)[:80])
    return value


def parse_mndiag(text: str) -> MndiagResult:
    """``dcgmi mndiag --json`` output (pure), with any noise around the document, else its plain-text table
    (``benchmarks/mndiag_text.py``); ``ParseError`` when it is neither."""
    try:
        doc = _document(text)
    except ParseError:
        return _from_table(parse_mndiag_table(text))
    hosts = tuple(MndiagHost(_int(h.get("host_id"), "host_id"), str(h.get("hostname", "")),
                             h.get("dcgm_version"), h.get("driver_version"),
                             tuple(_int(e.get("entity_id"), "entity_id") for e in _list(h, "entities")
                                   if e.get("entity_group") == "GPU"))
                  for h in _list(doc, "hosts"))
    tests = [t for c in _list(doc, "test_categories") for t in _list(c, "tests")]
    test = tests[0] if tests else {}
    results = tuple(MndiagEntity(_int(r.get("host_id"), "host_id"), str(r.get("entity_group", "")),
                                 _int(r.get("entity_id"), "entity_id"), _status(r.get("status"), "result"),
                                 _errors(r.get("warnings"), "warnings"),
                                 _texts(r.get("info")))
                    for r in _list(test, "results"))
    mpi = test.get("mpi_error")
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    runtime = doc.get("runtime_error")
    return MndiagResult(
        test=str(test["name"]) if "name" in test else None,
        status=_status(test["status"], "test") if "status" in test else None,
        num_hosts=_int(metadata.get("num_hosts", len(hosts)), "num_hosts"), hosts=hosts, results=results,
        global_errors=_errors(doc.get("global_errors"), "global_errors"),
        mpi_error=str(mpi.get("warning", ""))[:500] if isinstance(mpi, dict) else None,
        runtime_error=str(runtime)[:500] if runtime else None)


def _from_table(fields: Mapping[str, Any]) -> MndiagResult:
    gpus: dict[int, list[int]] = {}
    for host_id, gpu, _, _ in fields["results"]:
        gpus.setdefault(host_id, []).append(gpu)
    hosts = tuple(MndiagHost(i, name, fields["dcgm"], fields["driver"], tuple(gpus.get(i, ())))
                  for i, name in fields["hosts"])
    results = tuple(MndiagEntity(h, "GPU", g, _status(status, "GPU"), tuple(MndiagError(e[:500]) for e in errors))
                    for h, g, status, errors in fields["results"])
    return MndiagResult(test=fields["test"], status=_status(fields["status"], "test"),
                        num_hosts=fields["num_hosts"] if fields["num_hosts"] is not None else len(hosts),
                        hosts=hosts, results=results, mpi_error=fields["mpi_error"],
                        runtime_error=fields["runtime_error"])


def evaluate_mndiag(job: Any, result: MndiagResult, ctx: BenchContext) -> list[Finding]:
    """Per inventory host: its GPUs' worst result against ``mndiag.result``; failing GPUs named."""
    def error(host: str, message: str, remedy: str = REMEDY["run"]) -> Finding:
        return Finding(host=host, check="mndiag.run", status=Status.ERROR, component=job.component,
                       source=job.job_id, remedy=remedy, message=f"{job.prefix}{message}")

    if result.runtime_error or result.status is None:
        why = result.runtime_error or "no test result in the output"
        return [error(h, f"dcgmi mndiag did not run: {why}") for h in job.hosts]
    gpu_failures = [r for r in result.results if r.status == "Fail"]
    if result.status != "Pass" and not gpu_failures and result.mpi_error is not None:
        return [error(h, f"mnubergemm {result.status} without a GPU error: {result.mpi_error}") for h in job.hosts]
    reported: dict[str, MndiagHost] = {}
    for h in result.hosts:
        name = host_of(h.hostname, job, ctx)
        if name is not None:
            reported[name] = h
    out: list[Finding] = []
    for host in job.hosts:
        if host not in reported:
            out.append(error(host, f"{host} not in dcgmi mndiag's results ({result.num_hosts} hosts reported)",
                             REMEDY["missing"]))
            continue
        out += _host_findings(job, host, reported[host], result, ctx)
    return out


def _host_findings(job: Any, host: str, reported: MndiagHost, result: MndiagResult,
                   ctx: BenchContext) -> list[Finding]:
    gpus = [r for r in result.results if r.host_id == reported.host_id and r.group == "GPU"]
    if not gpus:
        return [Finding(host=host, check="mndiag.result", status=Status.ERROR, component=job.component,
                        source=job.job_id, remedy=REMEDY["run"],
                        message=f"{job.prefix}dcgmi mndiag reported no GPU result for {host} "
                                f"(host {reported.host_id})")]
    worst = max(gpus, key=lambda r: _RANK.get(r.status, 0)).status
    exp = ctx.profile.expect("mndiag.result")
    verdict = finding_from_expectation(host, "mndiag.result", exp, worst, source=job.job_id, remedy=REMEDY["gpu"],
                                       component=job.component, profile=ctx.profile)
    if exp is None and worst in ("Fail", "Warn"):       # DCGM says so itself: never silently skipped
        verdict = Finding(host=host, check="mndiag.result", status=Status.WARN, component=job.component,
                          value=worst, source=job.job_id, remedy=REMEDY["gpu"],
                          message=f"{job.prefix}dcgmi mndiag: {worst} on {host}; no expectation mndiag.result in "
                                  f"profile {ctx.profile.name}")
    failing = [r for r in gpus if r.status in ("Fail", "Warn")]
    named = ", ".join(f"GPU {r.entity_id} {r.status}" for r in failing)
    said = f"{job.prefix}dcgmi mndiag on {host} (host {reported.host_id}): {len(gpus)} GPUs, {named or 'all Pass'}"
    if verdict.status is Status.PASS:
        verdict = dataclasses.replace(verdict, message=said)
    elif exp is not None and verdict.status is not Status.SKIP:
        verdict = dataclasses.replace(verdict, message=f"{said}; expected {exp.value} (source: {exp.source[:90]})")
    else:
        verdict = dataclasses.replace(verdict, message=f"{said}; {verdict.message}")
    return [verdict] + [_gpu_finding(job, host, r, exp is not None) for r in failing]


def _gpu_finding(job: Any, host: str, entity: MndiagEntity, expected: bool) -> Finding:
    text = "; ".join(e.text for e in entity.errors) or "no error text"
    status = Status.WARN if entity.status == "Warn" or not expected else Status.FAIL
    return Finding(host=host, check="mndiag.gpu", status=status, component=f"gpu{entity.entity_id}",
                   value=entity.status, expected="Pass", source=job.job_id, remedy=REMEDY["gpu"],
                   message=f"GPU {entity.entity_id} of {host}: mnubergemm {entity.status}: {text}")


def mndiag_program(job: Any, profile: Profile, options: Mapping[str, Any]) -> Program:
    """``dcgmi mndiag --hostList "h1;h2;..." --run mnubergemm --json`` run on the job's first host (the head node),
    with settings ``benchmarks.mndiag.binary``, ``parameters`` (``--parameters``), ``host_engine_address``."""
    binary = str(bench_setting(profile, options, "mndiag.binary", "dcgmi"))
    argv = [binary, "mndiag", "--hostList", ";".join(job.hosts), "--run", str(job.test), "--json"]
    parameters = bench_setting(profile, options, "mndiag.parameters", []) or []
    for parameter in [parameters] if isinstance(parameters, str) else parameters:
        argv += ["--parameters", str(parameter)]
    address = bench_setting(profile, options, "mndiag.host_engine_address", None)
    if address:
        argv += ["--hostEngineAddress", str(address)]
    return Program(argv=tuple(argv))


def mndiag_metric(result: MndiagResult) -> float | None:
    """The number of GPUs mndiag failed (the report's headline number); None when it gave no verdict."""
    if result.status is None:
        return None
    return float(sum(1 for r in result.results if r.status == "Fail"))


SPEC = register(BenchmarkSpec(
    name="mndiag",
    description="DCGM multi-node diagnostics (dcgmi mndiag, mnubergemm): DCGM's verdict per host and GPU",
    tests=lambda profile, options: (str(bench_setting(profile, options, "mndiag.run", "mnubergemm")),),
    shapes={"quick": ("domain",), "acceptance": ("domain",)},
    ranks_per_host=lambda profile, shape, options=None: 1,
    program=mndiag_program,
    parse=parse_mndiag,
    evaluate=evaluate_mndiag,
    metric=mndiag_metric,
    launcher="direct",
))
