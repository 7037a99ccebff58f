"""What a merge believes of a node's bundle: identity from its place, a bounded clock, plain manifest values.

    source = Source(Path("/shared/hc-spool/gpu007"), order=0, speaks_for="gpu007")
    source.refusal("gpu009", folder)      # "gpu007's bundle carried data for gpu009: refused (...)"
    when, problem = collection_time("2099-01-01T00:00:00+00:00", now)   # (oldest, "in the future ...")
    entries = manifest_entries(json.loads(manifest_text))           # {name: entry}, malformed ones dropped
    probes, unknown = bundle_probes(results_json, known_names)

A node writes its own bundle, so everything in it is untrusted input (docs/security.md). A node may lie
about itself; it must never speak for another host. Hence:

- **identity from the place**: a bundle found inside a spool folder (``SPOOL/<X>/``) supplies host X
  only, whatever its ``raw/`` holds; every other host folder in it is refused and listed. A bundle
  named on the command line (a run directory, a partial sweep) is vouched for by the operator and
  supplies every host it holds. A merged run inside a spool (it has ``merge.json``) is never read again;
- **a bounded clock**: a ``collected_at`` in the future of the merge (beyond ``DEFAULTS.merge_clock_skew_s``)
  or older than ``DEFAULTS.merge_max_age_days`` is flagged and ranked oldest: it never wins "newest";
- **the profile only**: of a node's manifest entry, only a known profile name is kept; ``vars``,
  ``address`` and ``group`` (drain targets, where to reach it, which fleet it belongs to) come from the
  inventory or the scheduler, never from the node.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.hostnames import host_name_problem
from healthcheck.core.model import Finding, Status
from healthcheck.store.safeio import BundleFileError, read_regular

OLDEST = datetime.min.replace(tzinfo=timezone.utc)
MERGE_RECORD = "merge.json"   # written beside every merged run: a merged run is not a node bundle
MAX_JSON_BYTES = 64 << 20


@dataclass(frozen=True)
class Source:
    """One bundle to read: its folder, the position of its source on the command line, and the one host
    it may supply (``speaks_for``: its spool folder's name) or None (named on the command line)."""

    bundle: Path
    order: int
    speaks_for: str | None = None

    def may_supply(self, host: str) -> bool:
        return self.speaks_for is None or host == self.speaks_for

    def refusal(self, host: str, folder: Path) -> str:
        """The line merge.json, the console and the report give for a host folder it may not supply."""
        return f"{self.speaks_for}'s bundle carried data for {host}: refused ({folder})"


@dataclass(frozen=True)
class Flag:
    """Something a bundle claimed that the merge did not believe, about ``host``: a ``merge.*`` finding
    of that host when it is graded (``merge.identity``: the spool folder's host; ``merge.collected_at``)."""

    host: str
    check: str
    text: str

    def finding(self) -> Finding:
        """A WARN: reported, never drained (``merge.*`` is advisory, healthcheck.ops.drain)."""
        expected, remedy = _FLAG_TEXT[self.check]
        return Finding(host=self.host, check=self.check, status=Status.WARN, expected=expected,
                       message=self.text, remedy=remedy, source="merge")


_FLAG_TEXT = {
    "merge.identity": ("only its own host's outputs (a spool folder speaks for the host it names)",
                       "A node's bundle held outputs for another host: check who writes this node's spool "
                       "folder (a hostile or misconfigured node, a copied image); the other host was graded "
                       "on its own bundle only"),
    "merge.collected_at": ("a collection time within the merge's clock bounds",
                           "Check the node's clock (chronyc tracking, timedatectl); its collection was ranked "
                           "oldest, so another source's collection of this host wins when there is one"),
}


def is_merged_run(bundle: Path) -> bool:
    """A folder written by ``healthcheck merge`` (it holds ``merge.json``): a fleet run, not a node's bundle."""
    return os.path.lexists(bundle / MERGE_RECORD)


def read_json(path: Path, limit: int = MAX_JSON_BYTES) -> Any:
    """A small JSON file of a bundle (never through a link, never a FIFO), or None when unusable (orjson:
    a merge reads two or three per node)."""
    try:
        data, cut = read_regular(path, limit)
        return None if cut else orjson.loads(data)
    except (BundleFileError, ValueError, RecursionError):
        return None


def collection_time(text: Any, now: datetime) -> tuple[datetime, str | None]:
    """``collected_at`` as the time a merge ranks it by, and why it is not believed (None when it is).

    Missing or garbled ranks oldest without a complaint (hand-made bundles have none); a time in the
    future of ``now`` beyond the allowed clock skew, or older than the allowed age, ranks oldest and is
    flagged: a node cannot make its collection win "newest" by setting its clock."""
    try:
        when = datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        when = None
    if when is None:
        return OLDEST, None
    when = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    skew = timedelta(seconds=DEFAULTS.merge_clock_skew_s)
    if when > now + skew:
        return OLDEST, (f"collected_at {text} is {_span(when - now)} in the future of this merge "
                        f"({now.isoformat(timespec='seconds')}): not believed, ranked oldest")
    if when < now - timedelta(days=DEFAULTS.merge_max_age_days):
        return OLDEST, (f"collected_at {text} is {_span(now - when)} before this merge "
                        f"({now.isoformat(timespec='seconds')}): not believed, ranked oldest")
    return when, None


def _span(delta: timedelta) -> str:
    return f"{delta.days} days" if delta.days >= 2 else f"{delta.total_seconds() / 3600:.1f} h"


def manifest_entries(manifest: Any) -> dict[str, dict[str, Any]]:
    """Host name -> manifest entry, for the entries that are objects with a usable host name; anything
    else (``hosts: 5``, ``null``, a list as a name) is left out, never raised."""
    listed = manifest.get("hosts") if isinstance(manifest, Mapping) else None
    if not isinstance(listed, list):
        return {}
    return {h["name"]: h for h in listed
            if isinstance(h, Mapping) and host_name_problem(h.get("name")) is None}


def bundle_probes(results: Any, known: Collection[str]) -> tuple[tuple[str, ...], list[str]]:
    """The probes a bundle's ``results.json`` says it ran that this healthcheck knows, and the names it
    does not know (a newer version's probe, or garbage): those are reported, never graded."""
    run = results.get("run") if isinstance(results, Mapping) else None
    listed = run.get("probes") if isinstance(run, Mapping) else None
    if not isinstance(listed, list):
        return (), []
    names = [p for p in listed if isinstance(p, str)]
    return tuple(p for p in names if p in known), [p[:60] for p in names if p not in known]


def trusted_entry(name: str, entry: Mapping[str, Any] | None, known_profiles: Collection[str],
                  skipped: list[str]) -> dict[str, Any]:
    """The merged manifest's entry for ``name``: its name, and the profile its bundle names when that is a
    known profile. Nothing else of a node's entry is kept (vars, address, group: drain targets and
    fleet membership come from the inventory or the scheduler)."""
    out: dict[str, Any] = {"name": name}
    profile = (entry or {}).get("profile")
    if isinstance(profile, str) and profile in known_profiles:
        out["profile"] = profile
    elif profile is not None:
        skipped.append(f"host {name}: profile {str(profile)[:60]!r} from its bundle is not a known profile "
                       "(give --profile or -i)")
    return out
