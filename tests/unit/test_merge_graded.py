"""``healthcheck merge`` takes a node's own grading when it was graded as the merge grades, else re-grades.

Node bundles are graded here as a node grades itself: each one a run directory of one host (the shipped
sample's outputs, captured 4-node H100 cluster, h100-node03 faulty; ``hostname.out`` saying the host's
own name) written by healthcheck with ``--copy-raw`` (its outputs inside it, as ``healthcheck node``
leaves them), holding its findings table, observations, version and profile digest. One test runs
``healthcheck node`` itself (an ``nvidia-smi`` shim printing our H100 fixture).
"""

from __future__ import annotations

import gzip
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from healthcheck.core.model import Finding, Status
from healthcheck.core.profiles import load_profile, profile_digest
from healthcheck.ops.merge import merge_bundles
from healthcheck.ops.node import NodeOptions, run_node
from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, TargetOptions
from healthcheck.store.findings_table import read_table, write_table
from healthcheck.store.results import load_results
from tests.conftest import FIXTURES, ROOT

SAMPLE = ROOT / "inventories" / "samples" / "h100-4node"
SOURCES = ("h100-node01", "h100-node02", "h100-node03", "h100-node04")
PROFILE = "h100-sxm5-8x"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def outputs(base: Path, name: str, of: str) -> Path:
    """A hand-made bundle ``base/raw/<name>/`` holding sample host ``of``'s outputs."""
    folder = base / "raw" / name
    shutil.copytree(SAMPLE / "raw" / of, folder, copy_function=shutil.copyfile)
    (folder / "hostname.out").write_text(f"{name}\n")
    return base


def graded_spool(tmp_path: Path, count: int) -> tuple[Path, Path, list[str]]:
    """A spool of ``count`` graded node bundles, and one bundle holding the same hosts' outputs."""
    spool, fleet, names = tmp_path / "spool", tmp_path / "fleet", []
    for i in range(count):
        name = f"gpu{i + 1:03d}"
        one = outputs(tmp_path / "outputs" / name, name, SOURCES[i % 4])
        execute_run(RunOptions(target=TargetOptions(replay=one, profile=PROFILE),
                               outputs=OutputOptions(run_dir=spool / name, render=False, copy_raw=True)))
        outputs(fleet, name, SOURCES[i % 4])
        names.append(name)
    return spool, fleet, names


def graded(run: Path) -> dict[str, Counter]:
    """Every host's findings as (check, status, component, message), counted."""
    return {name: Counter((f.check, f.status.value, f.component, f.message) for f in host.findings)
            for name, host in load_results(run).hosts.items()}


def grading(run: Path) -> dict[str, dict]:
    return {h: r.get("grading") for h, r in json.loads((run / "results.json").read_text())["hosts"].items()}


def test_merge_takes_the_nodes_grading_and_equals_a_replay_of_the_same_hosts(tmp_path: Path) -> None:
    spool, fleet, names = graded_spool(tmp_path, 8)
    out = merge_bundles([spool], tmp_path / "merged", profile=PROFILE)
    digest = profile_digest(load_profile(PROFILE))
    assert grading(tmp_path / "merged") == {n: {"taken": True, "why": "graded by the node: healthcheck 0.1.0, "
                                                f"profile {digest[:19]}"} for n in names}
    assert out.graded_by() == {"node": 8, "merge": 0}
    replay = execute_run(RunOptions(target=TargetOptions(replay=fleet, profile=PROFILE),
                                    outputs=OutputOptions(run_dir=tmp_path / "replay", render=False)))
    assert {n: h.verdict.value for n, h in out.run.results.hosts.items()} == \
        {n: h.verdict.value for n, h in replay.results.hosts.items()} == \
        {n: ("FAIL" if i % 4 == 2 else "WARN" if i % 4 == 3 else "PASS") for i, n in enumerate(names)}
    assert graded(tmp_path / "merged") == graded(tmp_path / "replay")   # every finding, fleet checks included
    assert any(f.check.startswith("fleet.") for f in load_results(tmp_path / "merged").hosts["gpu001"].findings)
    manifest = json.loads((tmp_path / "merged" / "manifest.json").read_text())
    assert manifest["merge"]["graded_by"] == {"node": 8, "merge": 0}
    assert json.loads((tmp_path / "merged" / "merge.json").read_text())["hosts"]["gpu003"]["grading"]["taken"]


def lie_about_itself(spool: Path, name: str, of: str) -> None:
    """The node graded healthy outputs, then its outputs became ``of``'s (the faulty sample host)."""
    folder = spool / name / "raw" / name
    shutil.rmtree(folder)
    outputs(spool / name, name, of)


def edit_results(bundle: Path, edit) -> None:  # type: ignore[no-untyped-def]
    path = bundle / "results.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def test_a_mismatched_version_or_profile_digest_is_regraded_and_regrade_regrades_all(tmp_path: Path) -> None:
    spool, _, names = graded_spool(tmp_path, 4)
    for name in ("gpu001", "gpu002", "gpu004"):
        lie_about_itself(spool, name, "h100-node03")   # graded PASS/WARN by the node, faulty outputs now
    edit_results(spool / "gpu001", lambda d: d["run"].update(version="0.0.9"))
    edit_results(spool / "gpu002", lambda d: d["hosts"]["gpu002"].update(profile_digest="sha256:" + "0" * 64))
    out = merge_bundles([spool], tmp_path / "run", profile=PROFILE)
    digest = profile_digest(load_profile(PROFILE))[:19]
    assert grading(tmp_path / "run") == {
        "gpu001": {"taken": False, "why": "graded by healthcheck 0.0.9, this merge is 0.1.0"},
        "gpu002": {"taken": False, "why": f"graded against sha256:000000000000, this merge grades against {digest}"},
        "gpu003": {"taken": True, "why": f"graded by the node: healthcheck 0.1.0, profile {digest}"},
        "gpu004": {"taken": True, "why": f"graded by the node: healthcheck 0.1.0, profile {digest}"}}
    # re-graded from the outputs: FAIL; gpu004's word about itself is taken (it lies about itself only)
    assert {n: h.verdict.value for n, h in out.run.results.hosts.items()} == {
        "gpu001": "FAIL", "gpu002": "FAIL", "gpu003": "FAIL", "gpu004": "WARN"}
    again = merge_bundles([spool], tmp_path / "regraded", profile=PROFILE, regrade=True)
    regraded = {"taken": False, "why": "merge --regrade: graded from its outputs"}
    assert grading(tmp_path / "regraded") == {name: regraded for name in names}
    assert {n: h.verdict.value for n, h in again.run.results.hosts.items()} == dict.fromkeys(names, "FAIL")
    assert again.graded_by() == {"node": 0, "merge": 4}


def forge_table(bundle: Path, owner: str) -> None:
    by_host = read_table(bundle)
    forged = Finding(host="gpu002", check="gpu.ecc", status=Status.FAIL, message="forged by gpu001")
    write_table(bundle, [*by_host[owner], forged])


def forge_results(bundle: Path, owner: str) -> None:
    edit_results(bundle, lambda d: d["hosts"].update(gpu002=d["hosts"][owner]))


def forge_observations(bundle: Path, owner: str) -> None:
    """The node's member of the observation store gains a line speaking for gpu002 (same layout, its name)."""
    at = json.loads((bundle / "results.json").read_text())["hosts"][owner]["observations_at"]
    data = (bundle / "observations.jsonl.gz").read_bytes()
    text = gzip.decompress(data[at[0]:at[0] + at[1]])
    line = text.splitlines()[0].replace(f'"host":"{owner}"'.encode(), b'"host":"gpu002"')
    member = gzip.compress(text + line + b"\n")
    (bundle / "observations.jsonl.gz").write_bytes(data[:at[0]] + member)
    edit_results(bundle, lambda d: d["hosts"][owner].update(observations_at=[at[0], len(member)]))


@pytest.mark.parametrize("forge", [forge_table, forge_results, forge_observations])
def test_a_nodes_own_grading_for_another_host_is_refused(tmp_path: Path, forge) -> None:  # type: ignore[no-untyped-def]
    spool, _, _ = graded_spool(tmp_path, 2)
    forge(spool / "gpu001", "gpu001")
    out = merge_bundles([spool], tmp_path / "run", profile=PROFILE)
    record = grading(tmp_path / "run")
    assert record["gpu001"]["taken"] is False and record["gpu001"]["refused"] is True
    assert record["gpu002"]["taken"] is True
    what = {forge_table: "findings table held findings for", forge_results: "results.json held results for",
            forge_observations: "observations.jsonl.gz member named"}[forge]
    what = f'{what} "gpu002"' if forge is forge_observations else f"{what} gpu002"
    assert record["gpu001"]["why"] == f"its {what}: refused"
    assert out.refused == [f"gpu001's bundle carried a grading for another host: refused "
                           f"({spool.resolve() / 'gpu001'}): its {what}: refused"]
    results = load_results(tmp_path / "run")
    assert [(f.check, f.status) for f in results.hosts["gpu001"].findings if f.check.startswith("merge.")] == [
        ("merge.identity", Status.WARN)]
    assert not any(f.message == "forged by gpu001" for f in results.findings())
    assert {n: h.verdict.value for n, h in results.hosts.items()} == {"gpu001": "WARN", "gpu002": "PASS"}


def table_with_a_list_as_check(bundle: Path) -> None:
    raw = json.loads(gzip.decompress((bundle / "findings.table.json.gz").read_bytes()))
    raw["columns"]["check"]["values"][0] = ["not", "a", "name"]
    (bundle / "findings.table.json.gz").write_bytes(gzip.compress(json.dumps(raw).encode()))


def observations_bomb(bundle: Path) -> None:
    member = gzip.compress(b" " * (300 << 20))   # 300 MiB of blanks in a 300 KiB member
    (bundle / "observations.jsonl.gz").write_bytes(member)
    edit_results(bundle, lambda d: d["hosts"]["gpu001"].update(observations_at=[0, len(member)]))


MALFORMED = {
    "a list as a check name": (table_with_a_list_as_check, "its findings table has a check name that is not a "
                                                           "dotted id"),
    "an inflating member": (observations_bomb, "its observations.jsonl.gz inflates past 268435456 bytes"),
    "another results schema": (lambda b: edit_results(b, lambda d: d.update(schema="healthcheck.results/9")),
                                   "its results.json is not of schema healthcheck.results/3"),
    "observations elsewhere": (lambda b: edit_results(b, lambda d: d["hosts"]["gpu001"].update(
        observations_at=[100_000, 5])), "its observations.jsonl.gz ends before the host's member "
                                        "(100000 + 5 bytes)"),
    "observations far away": (lambda b: edit_results(b, lambda d: d["hosts"]["gpu001"].update(
        observations_at=[10 ** 12, 5])), "its results.json does not locate its observations"),
    "no table": (lambda b: (b / "findings.table.json.gz").unlink(), "its bundle holds no findings.table.json.gz"),
    "a store line of another form": (lambda b: rewrite_member(b, lambda t: b'{"host":"gpu001","observations":{}}\n'),
                                     "its observations.jsonl.gz member of gpu001 has a line this healthcheck "
                                     "does not write"),
    "a store line cut short": (lambda b: rewrite_member(b, lambda t: t[:-1]), "its observations.jsonl.gz member "
                                                                               "of gpu001 is not one complete "
                                                                               "member of whole lines"),
    "key observations not an object per probe": (lambda b: edit_results(b, lambda d: d["hosts"]["gpu001"].update(
        observations={"gpu": 8})), "its results.json entry's observations are not an object per probe"),
}


def rewrite_member(bundle: Path, edit) -> None:  # type: ignore[no-untyped-def]
    at = json.loads((bundle / "results.json").read_text())["hosts"]["gpu001"]["observations_at"]
    data = (bundle / "observations.jsonl.gz").read_bytes()
    member = gzip.compress(edit(gzip.decompress(data[at[0]:at[0] + at[1]])))
    (bundle / "observations.jsonl.gz").write_bytes(data[:at[0]] + member)
    edit_results(bundle, lambda d: d["hosts"]["gpu001"].update(observations_at=[at[0], len(member)]))


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_node_grading_is_regraded_from_the_outputs(tmp_path: Path, case: str) -> None:
    spool, _, _ = graded_spool(tmp_path, 2)
    lie_about_itself(spool, "gpu001", "h100-node03")   # its outputs are faulty: a re-grade FAILs it
    spoil, why = MALFORMED[case]
    spoil(spool / "gpu001")
    out = merge_bundles([spool], tmp_path / "run", profile=PROFILE)
    assert grading(tmp_path / "run")["gpu001"] == {"taken": False, "why": why}
    assert {n: h.verdict.value for n, h in out.run.results.hosts.items()} == {"gpu001": "FAIL", "gpu002": "PASS"}
    assert grading(tmp_path / "run")["gpu002"]["taken"] is True


@pytest.fixture
def shim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    xml = FIXTURES / "nvidia-smi-xml" / "h100-8x-healthy.xml"
    (folder / "nvidia-smi").write_text(f"#!/bin/sh\nexec cat {shlex.quote(str(xml))}\n")
    (folder / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    return folder


def test_healthcheck_node_bundles_record_version_and_digest_and_are_taken(tmp_path: Path, shim: Path) -> None:
    spool = tmp_path / "spool"
    for host in ("gpu007", "gpu008"):
        run_node(NodeOptions(spool=spool, host=host, probes=["gpu"], profile=PROFILE))
    results = json.loads((spool / "gpu007" / "results.json").read_text())
    assert results["run"]["version"] == "0.1.0"
    assert results["hosts"]["gpu007"]["profile_digest"] == profile_digest(load_profile(PROFILE))
    merged = subprocess.run([sys.executable, "-m", "healthcheck", "merge", str(spool), "--run-dir",
                             str(tmp_path / "run"), "--profile", PROFILE], capture_output=True, text=True,
                            timeout=300, env=ENV)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert "grading: 2 host(s) as their node graded them, 0 graded here (merge.json says why)\n" in merged.stdout
    assert {h: g["taken"] for h, g in grading(tmp_path / "run").items()} == {"gpu007": True, "gpu008": True}
    regraded = subprocess.run([sys.executable, "-m", "healthcheck", "merge", str(spool), "--run-dir",
                               str(tmp_path / "again"), "--profile", PROFILE, "--regrade"], capture_output=True,
                              text=True, timeout=300, env=ENV)
    assert regraded.returncode == 0, regraded.stderr
    assert graded(tmp_path / "again") == graded(tmp_path / "run")


def test_a_profile_extended_by_host_vars_is_digested_for_each_host() -> None:
    """``mounts`` host vars name their host in the extended profile's sources: two hosts with the same vars
    have digests of their own, in the merge (``host_digest``) as in the run that records them."""
    from types import SimpleNamespace

    from healthcheck.core.hostvars import host_profile
    from healthcheck.core.model import Host
    from healthcheck.run.execute import _record_profile_digests
    from healthcheck.run.nodegrading import host_digest
    from healthcheck.store.results import HostResult

    base = load_profile(PROFILE)
    hosts = [Host("gpu001", profile=PROFILE, vars={"mounts": ["/lustre"]}),
             Host("gpu002", profile=PROFILE, vars={"mounts": ["/lustre"]}),
             Host("gpu003", profile=PROFILE), Host("gpu004", profile=PROFILE)]
    own = {h.name: profile_digest(host_profile(h, base)) for h in hosts}
    assert own["gpu001"] != own["gpu002"] and own["gpu003"] == own["gpu004"] == profile_digest(base)
    assert {h.name: host_digest(h, {PROFILE: base}) for h in hosts} == own
    results = {h.name: HostResult(name=h.name) for h in hosts}
    plan = SimpleNamespace(hosts=hosts, profiles={PROFILE: base},
                           profile_of={h.name: host_profile(h, base) for h in hosts})
    _record_profile_digests(plan, results)  # type: ignore[arg-type]
    assert {name: r.profile_digest for name, r in results.items()} == own
