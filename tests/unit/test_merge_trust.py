"""``healthcheck merge`` against hostile node bundles (issue 29): a node speaks only for itself.

Every hostile bundle is built here from the shipped sample bundle (captured 4-node H100 cluster;
h100-node03 faulty, the others healthy): a node's spool folder ``SPOOL/<X>/`` that also carries
outputs for other hosts, clocks set to 2099 or 1970, manifests pointing the drain elsewhere, malformed
``results.json``/``manifest.json``, a hard link to a file outside the spool, a merged run written
inside the spool, a host folder vanishing while it is copied.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from healthcheck.ops import merge as merge_module
from healthcheck.ops.drain import plan_drain
from healthcheck.ops.merge import merge_bundles
from healthcheck.store.results import load_results
from tests.conftest import ROOT

SAMPLE = ROOT / "inventories" / "samples" / "h100-4node"
FUTURE = "2099-01-01T00:00:00+00:00"


def node_bundle(spool: Path, owner: str, hosts: dict[str, tuple[str, str]], manifest: object = None) -> Path:
    """``spool/<owner>/`` holding, per claimed host, the sample outputs of another host and a collected_at."""
    bundle = spool / owner
    for host, (outputs_of, collected_at) in hosts.items():
        shutil.copytree(SAMPLE / "raw" / outputs_of, bundle / "raw" / host)
        meta = json.loads((bundle / "raw" / host / "_host.json").read_text())
        meta["collected_at"] = collected_at
        (bundle / "raw" / host / "_host.json").write_text(json.dumps(meta))
    listed = manifest if manifest is not None else {"hosts": [{"name": owner, "profile": "h100-sxm5-8x"}]}
    (bundle / "manifest.json").write_text(json.dumps(listed))
    return bundle


def verdicts(run: Path) -> dict[str, str]:
    return {h: r["verdict"] for h, r in json.loads((run / "results.json").read_text())["hosts"].items()}


def findings(run: Path, host: str, check: str) -> list[dict]:
    return [f for f in json.loads((run / "results.json").read_text())["hosts"][host]["findings"]
            if f["check"] == check]


def inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"defaults": {"profile": "h100-sxm5-8x"},
                                   "groups": {"all": {"hosts": "h100-node[01-04]"}}}))
    return inv


@pytest.mark.parametrize("with_inventory", [False, True])
def test_a_spool_folder_supplies_its_own_host_only(tmp_path: Path, with_inventory: bool) -> None:
    """node01's spool carries raw/h100-node03 (healthy outputs) and raw/h100-node02 (faulty ones), newer:
    neither is believed; node03 stays FAIL, node02 PASS, the refusals are listed and reported."""
    spool = tmp_path / "spool"
    node_bundle(spool, "h100-node01", {"h100-node01": ("h100-node01", "2026-11-22T04:00:00+00:00"),
                                       "h100-node02": ("h100-node03", FUTURE),
                                       "h100-node03": ("h100-node01", FUTURE)})
    run = tmp_path / "run"
    out = merge_bundles([SAMPLE, spool], run, inventory=inventory(tmp_path) if with_inventory else None)
    got = verdicts(run)
    assert (got["h100-node02"], got["h100-node03"]) == ("PASS", "FAIL")
    folder = spool / "h100-node01" / "raw"
    assert out.refused == [f"h100-node01's bundle carried data for h100-node02: refused ({folder / 'h100-node02'})",
                           f"h100-node01's bundle carried data for h100-node03: refused ({folder / 'h100-node03'})"]
    merge = json.loads((run / "merge.json").read_text())
    assert merge["refused"] == out.refused
    assert merge["hosts"]["h100-node02"]["source"] == str(SAMPLE / "raw" / "h100-node02")
    reported = findings(run, "h100-node01", "merge.identity")
    assert [(f["status"], f["message"]) for f in reported] == [("WARN", line) for line in out.refused]
    assert "carried data for h100-node02: refused" in (run / "report.html").read_text()
    plan = plan_drain(load_results(run))
    assert [d.host for d in plan.decisions] == ["h100-node03"]


def test_a_node_clock_in_the_future_or_far_past_never_wins_newest(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    node_bundle(spool, "h100-node03", {"h100-node03": ("h100-node01", FUTURE)})     # "repaired" in 2099
    node_bundle(spool, "h100-node02", {"h100-node02": ("h100-node03", "1970-01-01T00:00:00+00:00")})
    run = tmp_path / "run"
    out = merge_bundles([SAMPLE, spool], run)
    assert verdicts(run)["h100-node03"] == "FAIL"          # the sample's own collection of node03 wins
    assert verdicts(run)["h100-node02"] == "WARN"          # the sample's healthy one, with the flag
    sources = {h: p["source"] for h, p in json.loads((run / "merge.json").read_text())["hosts"].items()}
    assert (sources["h100-node02"], sources["h100-node03"]) == (str(SAMPLE / "raw" / "h100-node02"),
                                                               str(SAMPLE / "raw" / "h100-node03"))
    past, future = (line.split(": ", 1) for line in out.clock)
    assert past[0] == str(spool / "h100-node02" / "raw" / "h100-node02")
    assert re.fullmatch(r"collected_at 1970-01-01T00:00:00\+00:00 is \d{5} days before this merge \(20\d\d-\S+\): "
                        r"not believed, ranked oldest", past[1]), past
    assert future[0] == str(spool / "h100-node03" / "raw" / "h100-node03")
    assert re.fullmatch(r"collected_at 2099-01-01T00:00:00\+00:00 is \d{4,5} days in the future of this merge "
                        r"\(20\d\d-\S+\): not believed, ranked oldest", future[1]), future
    assert json.loads((run / "merge.json").read_text())["clock"] == out.clock
    (flag,) = findings(run, "h100-node03", "merge.collected_at")
    assert flag["status"] == "WARN" and "in the future of this merge" in flag["message"]


def test_manifest_vars_of_a_node_bundle_never_reach_the_merged_run(tmp_path: Path) -> None:
    """node01's manifest names slurm_node/k8s_node/address/group of node02: the merged manifest keeps only
    the profile, so a drain of the merged run targets node01 itself."""
    spool = tmp_path / "spool"
    node_bundle(spool, "h100-node03", {"h100-node03": ("h100-node03", "2026-11-22T04:00:00+00:00")}, manifest={
        "hosts": [{"name": "h100-node03", "profile": "h100-sxm5-8x", "address": "10.0.0.2", "group": "other",
                   "vars": {"slurm_node": "h100-node02", "k8s_node": "h100-node02"}}]})
    run = tmp_path / "run"
    merge_bundles([spool], run)
    (entry,) = json.loads((run / "manifest.json").read_text())["hosts"]
    assert (entry["name"], entry["profile"], entry["address"], entry["group"], entry["vars"]) == (
        "h100-node03", "h100-sxm5-8x", None, None, {})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    dry = subprocess.run([sys.executable, "-m", "healthcheck", "drain", str(run)], capture_output=True, text=True,
                         timeout=120, env=env)
    assert "NodeName=h100-node03" in dry.stdout and "h100-node02" not in dry.stdout, dry.stdout + dry.stderr


def test_malformed_bundles_are_skipped_and_named_the_rest_merged(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    cases = {"h100-node01": {"results": {"run": {"probes": ["gpu", "nosuchprobe"]}}},
             "h100-node02": {"results": {"run": []}},
             "h100-node03": {"manifest": {"hosts": 5}},
             "h100-node04": {"manifest": {"hosts": None}},
             "h100-node05": {"manifest": {"hosts": [{"name": ["h100-node05"], "profile": "h100-sxm5-8x"}]}}}
    for host, case in cases.items():
        bundle = node_bundle(spool, host, {host: ("h100-node01", "2026-11-22T04:00:00+00:00")},
                             manifest=case.get("manifest"))
        if "results" in case:
            (bundle / "results.json").write_text(json.dumps(case["results"]))
    run = tmp_path / "run"
    out = merge_bundles([spool], run, profile="h100-sxm5-8x")
    assert sorted(verdicts(run)) == sorted(cases)
    assert f"{spool / 'h100-node01' / 'results.json'}: probe(s) nosuchprobe unknown to this healthcheck: " \
           "not graded" in out.skipped
    assert json.loads((run / "results.json").read_text())["run"]["probes"] == ["gpu"]


def test_a_host_folder_vanishing_before_it_is_graded_is_that_hosts_error_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spool = tmp_path / "spool"
    for host in ("h100-node01", "h100-node02"):
        node_bundle(spool, host, {host: (host, "2026-11-22T04:00:00+00:00")})
    gone = spool / "h100-node02" / "raw" / "h100-node02"
    grade = merge_module.execute_run

    def vanishing(opts):  # type: ignore[no-untyped-def]
        shutil.rmtree(gone)  # the node replaced its bundle after the merge chose it, before it was graded
        return grade(opts)

    monkeypatch.setattr(merge_module, "execute_run", vanishing)
    run = tmp_path / "run"
    merge_bundles([spool], run)
    assert verdicts(run) == {"h100-node01": "PASS", "h100-node02": "ERROR"}
    (reach,) = findings(run, "h100-node02", "host.reachable")
    assert reach["message"] == f"h100-node02: no result from node: {gone} could not be read (No such file or directory)"


def test_a_hard_link_to_a_file_outside_the_spool_is_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("root:$6$secrethash:19000:0:99999:7:::\n")
    spool = tmp_path / "spool"
    bundle = node_bundle(spool, "h100-node01", {"h100-node01": ("h100-node01", "2026-11-22T04:00:00+00:00")})
    linked = bundle / "raw" / "h100-node01" / "hostname.out"
    linked.unlink()
    os.link(secret, linked)
    run = tmp_path / "run"
    merge_bundles([spool], run)
    (collect,) = findings(run, "h100-node01", "system.collect")
    assert collect["message"] == (f"hostname could not run: refused {linked}: has 2 hard links: a file linked "
                                  "from elsewhere is never read")
    assert not any("secrethash" in p.read_text(errors="replace") for p in run.rglob("*") if p.is_file()
                   and p.suffix in (".out", ".json", ".html", ".jsonl", ".md", ".xml"))


def test_a_merged_run_written_inside_the_spool_is_not_read_again(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    node_bundle(spool, "h100-node01", {"h100-node01": ("h100-node01", "2026-11-22T04:00:00+00:00")})
    merge_bundles([spool], spool / "merged")
    node_bundle(spool, "h100-node02", {"h100-node02": ("h100-node02", "2026-11-22T04:00:00+00:00")})
    out = merge_bundles([spool], tmp_path / "again")
    merge = json.loads((tmp_path / "again" / "merge.json").read_text())
    assert merge["candidates"] == 2 and out.refused == []
    assert {h: p["source"] for h, p in merge["hosts"].items()} == {
        "h100-node01": str(spool / "h100-node01" / "raw" / "h100-node01"),
        "h100-node02": str(spool / "h100-node02" / "raw" / "h100-node02")}
    assert f"{spool / 'merged'}: a merged run (merge.json) inside the spool, not a node's bundle: not read " \
           "again" in out.skipped


def test_cli_lists_refusals_on_stderr(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    node_bundle(spool, "h100-node01", {"h100-node01": ("h100-node01", "2026-11-22T04:00:00+00:00"),
                                       "h100-node02": ("h100-node03", FUTURE)})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    merged = subprocess.run([sys.executable, "-m", "healthcheck", "merge", str(SAMPLE), str(spool), "--run-dir",
                             str(tmp_path / "run")], capture_output=True, text=True, timeout=300, env=env)
    assert merged.returncode == 1, merged.stdout + merged.stderr   # node03 is the sample's faulty node
    assert (f"refused: h100-node01's bundle carried data for h100-node02: refused "
            f"({spool / 'h100-node01' / 'raw' / 'h100-node02'})\n") in merged.stderr
