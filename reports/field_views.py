"""Report views for what fleets learned the hard way: repeat offenders, evidence collected, observe-only checks.

    field_context(digest)   # {"offenders": [...], "evidence": [...], "observed": [...]} for report.html.j2

``offenders`` and ``evidence`` are top-level keys of results.json (``healthcheck.ops.nightly``,
``healthcheck.run.evidence``); ``observed`` are the non-PASS findings of observe-only checks
(``Finding.observe``), which never change a verdict, a drain or the exit code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from healthcheck.reports.digest import RunDigest


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def field_context(digest: RunDigest) -> dict[str, Any]:
    """Computed once per digest (report.html and summary.md both show it)."""
    return digest.memo("field_context", lambda: _field_context(digest))


def _field_context(digest: RunDigest) -> dict[str, Any]:
    observed = [f for f in digest.index.not_passing if getattr(f, "observe", False)]
    return {"offenders": _mappings(digest.document.get("offenders")),
            "evidence": _mappings(digest.document.get("evidence")),
            "observed": sorted(observed, key=lambda f: (-f.status.rank, f.check, f.host, f.component))}
