"""The NVLink domain view shared by the reports: results.json's ``domains`` table with each tray's and GPU's
status, for summary.md's per-domain table and report.html's rack map (trays x GPUs coloured by verdict).

    views = domain_views(digest)       # [DomainView(label="6f1d2c9e", verdict="FAIL", trays=[TrayView...])]

A tray's status is its host's verdict; a GPU's is FAIL where the GPU reports a fabric fault itself, else the
worst of its host's findings on that GPU (``gpu2``), else PASS. Rows that are not the shape the NVLink domain
check writes are skipped (results.json may be hand-edited or come from another version).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.core.model import Status
from healthcheck.reports.digest import RunDigest


@dataclass(frozen=True)
class GpuCell:
    index: int
    status: str
    note: str


@dataclass(frozen=True)
class TrayView:
    host: str
    position: str      # "slot 7 / tray 3" as the tray reports it
    clique: str
    status: str        # the host's verdict
    bad: bool          # counted as a bad tray by the domain check
    gpus: tuple[GpuCell, ...]
    problems: str


@dataclass(frozen=True)
class DomainView:
    cluster_uuid: str
    label: str
    verdict: str
    profile: str
    trays: str          # "17 of 18"
    gpus: str           # "68 of 72"
    bad: str            # "5 (share 0.278, max 0.25): r1t02, ..."
    racks: str
    cliques: str
    members: tuple[TrayView, ...]


def _of(have: Any, want: Any) -> str:
    return f"{have} of {want}" if want is not None else f"{have} (no expectation)"


def _gpu_status(host_findings: list[Any], gpu: Mapping[str, Any]) -> tuple[str, str]:
    if gpu.get("problem"):
        return Status.FAIL.value, str(gpu["problem"])
    comp = f"gpu{gpu.get('index')}"
    mine = [f for f in host_findings if f.component == comp and f.status is not Status.PASS]
    worst = max(mine, key=lambda f: f.status.rank, default=None)
    return (worst.status.value, f"{worst.check}: {worst.message}") if worst else (Status.PASS.value, "")


def _tray(digest: RunDigest, member: Mapping[str, Any]) -> TrayView:
    host = str(member.get("host"))
    result = digest.results.hosts.get(host)
    findings = list(result.findings) if result is not None else []
    verdict = digest.verdicts.get(host)
    cells = []
    for gpu in member.get("gpus") or ():
        if isinstance(gpu, Mapping):
            status, note = _gpu_status(findings, gpu)
            cells.append(GpuCell(int(gpu.get("index") or 0), status, note))
    where = " / ".join(f"{k} {member[k]}" for k in ("slot", "tray_index") if member.get(k) is not None)
    return TrayView(host=host, position=where.replace("tray_index", "tray") or "-", clique=str(member.get("clique")),
                    status=verdict.value if verdict is not None else "SKIP", bad=bool(member.get("bad")),
                    gpus=tuple(cells), problems="; ".join(str(p) for p in member.get("problems") or ()))


def domain_views(digest: RunDigest) -> list[DomainView]:
    """Every domain of the run, worst verdict first."""
    rows = digest.document.get("domains")
    out = []
    for row in rows if isinstance(rows, list) else ():
        if not isinstance(row, Mapping) or not isinstance(row.get("members"), list):
            continue
        bad = row.get("bad_trays") or []
        share = f"share {row.get('bad_share')}" + (f", max {row['bad_share_max']}" if row.get("bad_share_max")
                                                    is not None else "")
        uuid = str(row.get("cluster_uuid"))
        out.append(DomainView(
            cluster_uuid=uuid, label=uuid.split("-", 1)[0], verdict=str(row.get("verdict")),
            profile=str(row.get("profile")), trays=_of(row.get("trays"), row.get("expected_trays")),
            gpus=_of(row.get("gpus"), row.get("expected_gpus")),
            bad=f"{len(bad)} ({share})" + (f": {', '.join(map(str, bad))}" if bad else ""),
            racks=", ".join(map(str, row.get("racks") or ())) or "-",
            cliques=", ".join(map(str, row.get("cliques") or ())) or "-",
            members=tuple(_tray(digest, m) for m in row["members"] if isinstance(m, Mapping))))
    rank = {s.value: s.rank for s in Status}
    return sorted(out, key=lambda d: (-rank.get(d.verdict, 0), d.cluster_uuid))
