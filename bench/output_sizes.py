"""Bytes per host of each file a run writes, for a healthy (PASS) host and a faulty (FAIL) host.

    python bench/sweep_replay.py --hosts 1000 --bundle /tmp/b1k --keep /tmp/r1k
    python bench/output_sizes.py /tmp/r1k

Per host where the file has a part per host: results.json (the host's entry, compact as written),
observations.jsonl.gz (its gzip member, ``observations_at``), junit.xml (its ``<testsuite>``),
metrics.prom (its series), manifest.json (its ``hosts[]`` entry), findings.jsonl when there is one (its
lines). The findings table is columnar (each
distinct value once), so a host has no part of its own: its figure is the table of that kind's hosts
only, written alone, divided by their number. report.html shares its encoded lists across hosts: its
figure is the whole page divided by the hosts, for every kind. The median over the hosts of each kind
is printed. Nothing here is asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from healthcheck.store.findings_table import read_table, write_table  # noqa: E402

KINDS = ("PASS", "FAIL")


def _compact(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _slices(text: str, start: str, end: str) -> dict[str, int]:
    """Bytes of each host's ``start NAME ... end`` slice (junit: ``<testsuite name="HOST"``)."""
    out = {}
    for match in re.finditer(start, text):
        stop = text.index(end, match.end()) + len(end)
        out[match.group(1)] = len(text[match.start():stop].encode())
    return out


def _series(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines(keepends=True):
        found = re.search(r'host="([^"]+)"', line)
        if found:
            out[found.group(1)] = out.get(found.group(1), 0) + len(line.encode())
    return out


def _table_per_host(run_dir: Path, names: list[str]) -> float:
    table = read_table(run_dir)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_table(Path(tmp), [f for n in names for f in table.get(n, [])])
        return path.stat().st_size / max(1, len(names))


def sizes(run_dir: Path) -> dict[str, dict[str, float]]:
    doc = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    hosts = doc["hosts"]
    kinds = {k: [n for n, h in hosts.items() if h["verdict"] == k] for k in KINDS}
    per_host: dict[str, Callable[[str], float] | None] = {
        "results.json": lambda n: _compact(hosts[n]),
        "observations.jsonl.gz": lambda n: (hosts[n].get("observations_at") or [0, 0])[1],
    }
    junit = _slices((run_dir / "junit.xml").read_text(encoding="utf-8"), r'<testsuite name="([^"]+)"', "</testsuite>")
    per_host["junit.xml"] = lambda n: junit.get(n, 0)
    prom = _series((run_dir / "metrics.prom").read_text(encoding="utf-8"))
    per_host["metrics.prom"] = lambda n: prom.get(n, 0)
    listed = {h["name"]: _compact(h) for h in json.loads((run_dir / "manifest.json").read_text())["hosts"]}
    per_host["manifest.json"] = lambda n: listed.get(n, 0)
    journal = run_dir / "findings.jsonl"  # a live run killed before results.json, or a run of older code
    if journal.is_file():
        lines: dict[str, int] = {}
        for line in journal.read_bytes().splitlines(keepends=True):
            host = json.loads(line).get("host")
            lines[host] = lines.get(host, 0) + len(line)
        per_host["findings.jsonl"] = lambda n: lines.get(n, 0)
    out: dict[str, dict[str, float]] = {}
    for name, of in per_host.items():
        out[name] = {k: statistics.median(of(n) for n in names) if names else 0 for k, names in kinds.items()}
    out["findings.table.json.gz"] = {k: _table_per_host(run_dir, names) for k, names in kinds.items()}
    page = (run_dir / "report.html").stat().st_size / len(hosts)
    out["report.html"] = dict.fromkeys(KINDS, page)
    out["summary.md"] = dict.fromkeys(KINDS, (run_dir / "summary.md").stat().st_size / len(hosts))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    args = parser.parse_args()
    table = sizes(args.run_dir)
    print(f"{'file':26s} {'PASS host':>10s} {'FAIL host':>10s}   (bytes)")
    for name, row in table.items():
        print(f"{name:26s} {row['PASS']:10.0f} {row['FAIL']:10.0f}")
    totals = {k: sum(row[k] for row in table.values()) for k in KINDS}
    print(f"{'total':26s} {totals['PASS']:10.0f} {totals['FAIL']:10.0f}")


if __name__ == "__main__":
    main()
