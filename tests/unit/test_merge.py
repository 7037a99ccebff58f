"""``healthcheck merge``: newest collection per host, absent hosts, untrusted inputs, replay of the result.

Sources are built from the shipped sample bundle (captured 4-node H100 cluster; h100-node03 faulty):
"later" bundles copy a host's folder and move its ``collected_at`` forward, as a node-local run
of the next night would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from healthcheck.ops.merge import merge_bundles
from healthcheck.store import bundle as bundle_module
from tests.conftest import ROOT

SAMPLE = ROOT / "inventories" / "samples" / "h100-4node"
HOSTS = ("h100-node01", "h100-node02", "h100-node03", "h100-node04")


def later_bundle(base: Path, host: str, outputs_of: str, collected_at: str, transport_error: str | None = None) -> Path:
    """A node-local style bundle ``base/<host>/`` holding ``outputs_of``'s outputs under ``host``."""
    bundle = base / host
    shutil.copytree(SAMPLE / "raw" / outputs_of, bundle / "raw" / host)
    meta_path = bundle / "raw" / host / "_host.json"
    meta = json.loads(meta_path.read_text())
    meta.update(collected_at=collected_at, transport_error=transport_error)
    meta_path.write_text(json.dumps(meta))
    (bundle / "manifest.json").write_text(json.dumps({"hosts": [{"name": host, "profile": "h100-sxm5-8x"}]}))
    return bundle


def verdicts(run: Path) -> dict[str, str]:
    return {h: r["verdict"] for h, r in json.loads((run / "results.json").read_text())["hosts"].items()}


def test_newest_collection_wins_and_provenance_is_recorded(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    later_bundle(spool, "h100-node03", "h100-node01", "2026-11-22T04:00:00+00:00")  # node03 repaired next night
    later_bundle(spool, "h100-node02", "h100-node03", "2026-11-20T04:00:00+00:00")  # older than the sample
    out = merge_bundles([SAMPLE, spool], tmp_path / "run")
    # node03's faults are gone: it is graded on the newer outputs (node01's, hence the hostname WARN)
    assert verdicts(tmp_path / "run") == {"h100-node01": "PASS", "h100-node02": "PASS", "h100-node03": "WARN",
                                          "h100-node04": "WARN"}
    findings = json.loads((tmp_path / "run" / "results.json").read_text())["hosts"]["h100-node03"]["findings"]
    assert [f["message"] for f in findings if f["status"] not in ("PASS", "SKIP")] == [
        "node reports hostname 'h100-node01', inventory calls it 'h100-node03'"]
    merge = json.loads((tmp_path / "run" / "merge.json").read_text())
    assert merge["candidates"] == 6
    assert merge["hosts"]["h100-node03"] == {"source": str(spool / "h100-node03" / "raw" / "h100-node03"),
                                             "collected_at": "2026-11-22T04:00:00+00:00", "reachable": True,
                                             "grading": {"taken": False, "why": "its bundle holds no results.json"}}
    assert merge["hosts"]["h100-node02"]["grading"] == {  # the sample, named on the command line
        "taken": False, "why": "a bundle named on the command line is graded by the merge"}
    assert merge["hosts"]["h100-node02"]["source"] == str(SAMPLE / "raw" / "h100-node02")
    assert out.skipped == []
    assert (tmp_path / "run" / "report.html").is_file()


def test_prefer_last_and_newest_reachable(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    later_bundle(spool, "h100-node02", "h100-node03", "2026-11-20T04:00:00+00:00")
    merge_bundles([SAMPLE, spool], tmp_path / "last", prefer="last")
    assert verdicts(tmp_path / "last")["h100-node02"] == "FAIL"  # the older, faulty one came last
    down = tmp_path / "down"
    later_bundle(down, "h100-node01", "h100-node01", "2026-11-23T04:00:00+00:00", transport_error="connection refused")
    merge_bundles([SAMPLE, down], tmp_path / "newest")
    assert verdicts(tmp_path / "newest")["h100-node01"] == "ERROR"
    merge_bundles([SAMPLE, down], tmp_path / "reachable", prefer="newest-reachable")
    assert verdicts(tmp_path / "reachable")["h100-node01"] == "PASS"  # the sample's own collection


def test_hosts_expected_by_the_inventory_but_absent_are_no_result_errors(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"defaults": {"profile": "h100-sxm5-8x"},
                                   "groups": {"all": {"hosts": "h100-node[01-05]"}}}))
    spool = tmp_path / "spool"
    for host in ("h100-node01", "h100-node02"):
        later_bundle(spool, host, host, "2026-11-22T04:00:00+00:00")
    merge_bundles([spool], tmp_path / "run", inventory=inv)
    results = json.loads((tmp_path / "run" / "results.json").read_text())["hosts"]
    assert {h: r["verdict"] for h, r in results.items()} == {
        "h100-node01": "PASS", "h100-node02": "PASS", "h100-node03": "ERROR", "h100-node04": "ERROR",
        "h100-node05": "ERROR"}
    (reach,) = results["h100-node05"]["findings"]
    assert (reach["check"], reach["status"]) == ("host.reachable", "ERROR")
    assert reach["message"] == f"h100-node05: no result from node: in none of the merged sources ({spool})"


def test_untrusted_inputs_are_refused_not_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spool = tmp_path / "spool"
    bundle = later_bundle(spool, "h100-node01", "h100-node01", "2026-11-22T04:00:00+00:00")
    folder = bundle / "raw" / "h100-node01"
    (folder / "hostname.out").unlink()
    secret = tmp_path / "secret"
    secret.write_text("root:x:0:0\n")
    (folder / "hostname.out").symlink_to(secret)                   # a symlinked output
    limit = max(p.stat().st_size for p in (SAMPLE / "raw" / "h100-node01").iterdir())
    (folder / "uptime.out").write_bytes(b"x" * (limit + 1))          # over the per-file limit
    (folder / "meminfo.out").unlink()
    os.mkfifo(folder / "meminfo.out")                                 # a special file (opening it would block)
    (folder / "..evil.out").write_text("root:x")                      # not a bundle file name: never read
    (bundle / "raw" / "h100-node09").symlink_to(SAMPLE / "raw" / "h100-node03")  # a symlinked host folder
    monkeypatch.setattr(bundle_module, "MAX_FILE_BYTES", limit)
    out = merge_bundles([spool], tmp_path / "run")
    errors = [(f["check"], f["message"]) for f in json.loads((tmp_path / "run" / "results.json").read_text())
              ["hosts"]["h100-node01"]["findings"] if f["status"] == "ERROR"]
    assert errors == [
        ("system.collect", f"hostname could not run: refused {folder}/hostname.out: is a symbolic link (links in "
                           "a bundle are never followed)"),
        ("system.collect", f"uptime could not run: refused {folder}/uptime.out: over {limit} bytes: not read"),
        ("system.hostname", "the node did not report its hostname"),
        ("resources.collect", f"meminfo could not run: refused {folder}/meminfo.out: is not a regular file")]
    assert out.skipped == [f"{bundle / 'raw' / 'h100-node09'}: not a plain host folder (bad name, symlink or file)"]
    assert json.loads((tmp_path / "run" / "merge.json").read_text())["skipped"] == out.skipped
    assert not (tmp_path / "run" / "raw" / "h100-node09").exists()
    assert not any("root:x" in p.read_text(errors="replace") for p in (tmp_path / "run").rglob("*") if p.is_file()
                   and p.suffix in (".out", ".json", ".html", ".jsonl", ".md", ".xml"))


def test_cli_merge_then_replay_gives_the_same_verdicts(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    later_bundle(spool, "h100-node03", "h100-node01", "2026-11-22T04:00:00+00:00")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    merged = subprocess.run([sys.executable, "-m", "healthcheck", "merge", str(SAMPLE), str(spool), "--run-dir",
                             str(tmp_path / "run")], capture_output=True, text=True, timeout=300, env=env)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert merged.stdout.startswith("merged 4 hosts from 2 source(s); 0 expected host(s) without a result\n")
    again = subprocess.run([sys.executable, "-m", "healthcheck", "run", "--replay", str(tmp_path / "run"),
                            "--run-dir", str(tmp_path / "again")], capture_output=True, text=True, timeout=300,
                           env=env)
    assert again.returncode == 0, again.stderr
    assert verdicts(tmp_path / "again") == verdicts(tmp_path / "run")


def test_a_source_that_is_no_bundle_is_reported(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError):
        merge_bundles([tmp_path / "empty"], tmp_path / "run")
