"""``healthcheck merge`` reads the node bundles where they are: nothing copied, references in the run.

Node bundles are built from the shipped sample bundle (captured 4-node H100 cluster; h100-node03
faulty) as ``healthcheck node`` leaves them in a spool: ``SPOOL/<host>/raw/<host>/`` (each file a copy
of the sample's, ``hostname.out`` saying the host's own name).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from healthcheck.ops.merge import merge_bundles
from healthcheck.store.hostrefs import HostRef, host_refs, write_host_refs
from healthcheck.store.rundir import host_names, raw_dir
from tests.conftest import ROOT

SAMPLE = ROOT / "inventories" / "samples" / "h100-4node"
SOURCES = ("h100-node01", "h100-node02", "h100-node03", "h100-node04")
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
RUN_FILES = {"findings.table.json.gz", "junit.xml", "manifest.json", "merge.json", "metrics.prom",
             "observations.jsonl.gz", "raw/_source.json", "report.html", "results.json", "summary.md"}


def spool_of(base: Path, count: int) -> tuple[Path, list[str]]:
    """``count`` node bundles, host i holding the outputs of sample host i % 4 (every 4th one faulty)."""
    spool = base / "spool"
    names = []
    for i in range(count):
        name = f"gpu{i + 1:03d}"
        folder = spool / name / "raw" / name
        shutil.copytree(SAMPLE / "raw" / SOURCES[i % 4], folder, copy_function=shutil.copyfile)
        (folder / "hostname.out").write_text(f"{name}\n")
        (spool / name / "manifest.json").write_text(json.dumps({"hosts": [{"name": name, "profile": "h100-sxm5-8x"}]}))
        names.append(name)
    return spool, names


def files_in(run: Path) -> set[str]:
    return {str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()}


def verdicts(run: Path) -> dict[str, str]:
    return {h: r["verdict"] for h, r in json.loads((run / "results.json").read_text())["hosts"].items()}


def test_no_host_output_is_copied_whatever_the_fleet_size(tmp_path: Path) -> None:
    written = {}
    for count in (4, 12):
        spool, names = spool_of(tmp_path / str(count), count)
        run = tmp_path / str(count) / "run"
        merge_bundles([spool], run)
        assert verdicts(run) == {n: ("FAIL" if i % 4 == 2 else "WARN" if i % 4 == 3 else "PASS")
                                 for i, n in enumerate(names)}
        faulty = [n for i, n in enumerate(names) if i % 4 in (2, 3)]
        kept = files_in(run) - RUN_FILES
        # only what the report shows of failing hosts is kept: an excerpt of each output a finding names
        assert {k.split("/")[2] for k in kept} == set(faulty) and all(k.startswith("raw/_kept/") for k in kept)
        assert all((run / k).stat().st_size <= 16 << 10 for k in kept)
        written[count] = files_in(run) - kept
        refs = host_refs(run / "raw")
        assert {n: (r.bundle, r.spool) for n, r in refs.items()} == {n: (spool.resolve() / n, True) for n in names}
        merge = json.loads((run / "merge.json").read_text())
        assert merge["outputs"] == {"referenced": count, "kept_excerpts": len(kept), "in_run": 0}
        assert [p.name for p in run.parent.iterdir() if p.name.startswith(".")] == []  # the index is gone
    assert written[4] == written[12] == RUN_FILES


def test_a_removed_bundle_after_the_merge_is_named_on_rerender_and_replay(tmp_path: Path) -> None:
    spool, _ = spool_of(tmp_path, 4)
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"defaults": {"profile": "h100-sxm5-8x"},
                                   "groups": {"all": {"hosts": "gpu[001-005]"}}}))
    run = tmp_path / "run"
    merged = subprocess.run([sys.executable, "-m", "healthcheck", "merge", str(spool), "--run-dir", str(run),
                             "-i", str(inv)], capture_output=True, text=True, timeout=300, env=ENV)
    assert merged.returncode == 1, merged.stderr
    excerpt = "mlx5_0/fw_ver:28.39.1002"   # h100-node03's ib-sysfs.out, named by its failing findings
    assert excerpt in (run / "report.html").read_text()
    gone = spool / "gpu003"
    shutil.rmtree(gone)                                   # the faulty node's bundle is removed afterwards
    (run / "report.html").unlink()
    again = subprocess.run([sys.executable, "-m", "healthcheck", "report", str(run)], capture_output=True, text=True,
                           timeout=300, env=ENV)
    assert again.returncode == 0, again.stderr
    assert again.stderr == (f"healthcheck: gpu003: {gone.resolve()}/raw/gpu003 could not be read (No such file or "
                            "directory): its node bundle is gone; the reports use the run's results and kept "
                            "excerpts; a replay of this run gives this host 'no result from node'\n")
    assert excerpt in (run / "report.html").read_text()   # the kept excerpt
    replay = subprocess.run([sys.executable, "-m", "healthcheck", "run", "--replay", str(run), "--run-dir",
                             str(tmp_path / "again")], capture_output=True, text=True, timeout=300, env=ENV)
    assert replay.returncode == 1, replay.stderr
    assert verdicts(tmp_path / "again") == {**verdicts(run), "gpu003": "ERROR"}
    reach = [f for f in json.loads((tmp_path / "again" / "results.json").read_text())["hosts"]["gpu003"]["findings"]
             if f["check"] == "host.reachable"]
    assert [f["message"] for f in reach] == [f"gpu003: no result from node: {gone.resolve()}/raw/gpu003 could not "
                                             "be read (No such file or directory)"]
    assert host_refs(tmp_path / "again" / "raw") == host_refs(run / "raw")   # the replay references them too
    assert (tmp_path / "again" / "raw" / "gpu005" / "_host.json").is_file()    # the host without a bundle


def test_a_bundle_replaced_by_a_link_after_the_merge_is_never_followed(tmp_path: Path) -> None:
    spool, _ = spool_of(tmp_path, 2)
    run = tmp_path / "run"
    merge_bundles([spool], run)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(spool / "gpu002", elsewhere)
    (spool / "gpu002").symlink_to(elsewhere)
    out = subprocess.run([sys.executable, "-m", "healthcheck", "run", "--replay", str(run), "--run-dir",
                          str(tmp_path / "again")], capture_output=True, text=True, timeout=300, env=ENV)
    reach = [f["message"] for f in json.loads((tmp_path / "again" / "results.json").read_text())["hosts"]["gpu002"]
             ["findings"] if f["check"] == "host.reachable"]
    assert out.returncode == 1 and reach == [
        f"gpu002: no result from node: {spool.resolve()}/gpu002/raw/gpu002 could not be read (a symbolic link or "
        "not a folder (links are never followed))"]


def test_the_references_of_a_large_fleet_are_read(tmp_path: Path) -> None:
    raw = tmp_path / "run" / "raw"
    raw.mkdir(parents=True)
    refs = {f"gpu{i:05d}": HostRef(tmp_path / "spool" / f"gpu{i:05d}", spool=i % 2 == 0) for i in range(10_000)}
    write_host_refs(raw, refs)
    assert (raw / "_source.json").stat().st_size > 64 << 10
    assert raw_dir(tmp_path / "run") == raw
    assert host_refs(raw) == refs
    assert host_names(tmp_path / "run") == sorted(refs)


def test_a_replay_of_a_merged_run_grades_its_hosts_as_the_merge_did(tmp_path: Path) -> None:
    spool, _ = spool_of(tmp_path, 4)
    (spool / "gpu002" / "raw" / "gpu002" / "_host.json").unlink()   # a hand-made bundle: outputs only
    run = tmp_path / "run"
    merge_bundles([spool], run)
    again = subprocess.run([sys.executable, "-m", "healthcheck", "run", "--replay", str(run), "--run-dir",
                            str(tmp_path / "again")], capture_output=True, text=True, timeout=300, env=ENV)
    assert again.returncode == 1, again.stderr
    assert verdicts(tmp_path / "again") == verdicts(run) == {"gpu001": "PASS", "gpu002": "PASS", "gpu003": "FAIL",
                                                            "gpu004": "WARN"}


def test_the_merge_leaves_the_folders_beside_its_run_alone(tmp_path: Path) -> None:
    """The merge's working index is a folder of its own, removed after: nothing it did not write is deleted."""
    spool, _ = spool_of(tmp_path, 2)
    mine = tmp_path / f".run.merge-{os.getpid()}"
    mine.mkdir()
    (mine / "keep.txt").write_text("an operator's file")
    merge_bundles([spool], tmp_path / "run")
    assert (mine / "keep.txt").read_text() == "an operator's file"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".run.merge-" + str(os.getpid()), "run", "spool"])
