"""Replay treats a bundle as untrusted (issue 13.5, 13.6, 12.2): links never followed, malformed
pieces are ERRORs naming the file, a folder that is not a bundle is a usage error."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from healthcheck.run.execute import execute_run
from healthcheck.run.options import RunOptions
from healthcheck.store.bundle import ran_no_probes, read_bundle, read_manifest_hosts
from healthcheck.store.rundir import RunDirError

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "inventories" / "samples" / "h100-4node"
HOSTS = ("h100-node01", "h100-node02", "h100-node03", "h100-node04")
SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- not-for-the-report"


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    shutil.copytree(SAMPLE, tmp_path / "bundle")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "id_key").write_text(SECRET + "\n")
    return tmp_path / "bundle"


def _replay(bundle: Path, out: Path, **kw):
    return execute_run(RunOptions.build(replay=bundle, out=out, render=kw.pop("render", False), **kw))


def _checks(results, host: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in results.hosts[host].findings:
        out.setdefault(f.check, []).append(f)
    return out


def test_symlinked_output_is_refused_and_never_read(bundle, tmp_path):
    out = bundle / "raw" / "h100-node01" / "hostname.out"
    out.unlink()
    out.symlink_to(tmp_path / "outside" / "id_key")
    outcome = _replay(bundle, tmp_path / "runs", render=True)
    [collect] = _checks(outcome.results, "h100-node01")["system.collect"]
    assert collect.status.value == "ERROR"
    assert "refused raw/h100-node01/hostname.out: is a symbolic link" in collect.message
    for name in ("results.json", "report.html", "junit.xml"):
        assert SECRET not in (outcome.run_dir / name).read_text(), name
    assert SECRET not in gzip.decompress((outcome.run_dir / "findings.table.json.gz").read_bytes()).decode()
    assert not (outcome.run_dir / "raw" / "h100-node01" / "hostname.out").exists()


def test_linked_host_folder_jobs_folder_and_loop_copy_nothing_from_outside(bundle, tmp_path):
    (bundle / "raw" / "_jobs").symlink_to(tmp_path / "outside")
    (bundle / "raw" / "unlisted").symlink_to(tmp_path / "outside")
    (bundle / "raw" / "loop-host").symlink_to(bundle / "raw")
    shutil.rmtree(bundle / "raw" / "h100-node02")
    (bundle / "raw" / "h100-node02").symlink_to(bundle / "raw" / "h100-node01")
    outcome = _replay(bundle, tmp_path / "runs")
    copied = {p.relative_to(outcome.run_dir).as_posix() for p in outcome.run_dir.rglob("*")}
    assert not any("id_key" in p or p.startswith(("raw/_jobs", "raw/unlisted", "raw/loop-host")) for p in copied)
    reach = _checks(outcome.results, "h100-node02")["host.reachable"][0]
    assert reach.status.value == "ERROR" and "refused raw/h100-node02: is a symbolic link" in reach.message
    [bundle_error] = _checks(outcome.results, "h100-node01")["replay.bundle"]
    assert bundle_error.status.value == "ERROR"
    for name in ("raw/_jobs",):  # host-like entries are never copied (the replay references the bundle)
        assert f"{name}: a symbolic link, not followed" in bundle_error.message


def test_fifo_and_folder_named_like_an_output_are_refused(bundle, tmp_path):
    host = bundle / "raw" / "h100-node01"
    (host / "uname-r.out").unlink()
    os.mkfifo(host / "uname-r.out")  # reading it would block forever
    (host / "uptime.out").unlink()
    (host / "uptime.out").mkdir()
    outcome = _replay(bundle, tmp_path / "runs")
    messages = " ".join(f.message for f in _checks(outcome.results, "h100-node01")["system.collect"])
    assert "refused raw/h100-node01/uname-r.out: is not a regular file" in messages
    assert "refused raw/h100-node01/uptime.out: is not a regular file" in messages


@pytest.mark.parametrize("meta, why", [
    ("[1, 2]", "not a JSON object"),
    ('{"commands": []}', "'commands' is not an object of objects"),
    ('{"commands": {"uptime": 3}}', "'commands' is not an object of objects"),
    ('{"duration_s": "fast"}', "a 'duration_s' is not a number"),
    ('{"transport_error"', "malformed raw/h100-node03/_host.json: Expecting"),
])
def test_malformed_host_json_is_an_error_naming_the_file(bundle, tmp_path, meta, why):
    (bundle / "raw" / "h100-node03" / "_host.json").write_text(meta)
    outcome = _replay(bundle, tmp_path / "runs")
    reach = _checks(outcome.results, "h100-node03")["host.reachable"][0]
    assert reach.status.value == "ERROR"
    assert "raw/h100-node03/_host.json" in reach.message and why in reach.message
    assert outcome.results.hosts["h100-node01"].verdict.value == "PASS"  # the other hosts are graded as before


def test_malformed_rc_is_an_error_not_a_missing_tool(bundle, tmp_path):
    (bundle / "raw" / "h100-node01" / "uname-r.rc").write_text("zero\n")
    outcome = _replay(bundle, tmp_path / "runs")
    messages = [f.message for f in _checks(outcome.results, "h100-node01")["system.collect"]]
    assert messages == ["uname-r could not run: refused raw/h100-node01/uname-r.rc: malformed: 'zero' is not an "
                        "exit code"]


@pytest.mark.parametrize("manifest, why", [
    ('{"hosts": null}', "'hosts' is not a list"),
    ('{"hosts": [{"profile": "h100-sxm5-8x"}]}', "hosts[0]: host name None is not a non-empty string"),
    ('{"hosts": [{"name": 7}]}', "hosts[0]: host name 7 is not a non-empty string"),
    ('{"hosts": [{"name": "n1", "vars": [1]}]}', "hosts[0]: vars is not an object"),
    ('{"hosts": [{"name": "n1", "colour": "red"}]}', "hosts[0]: unknown keys ['colour']"),
    ('{"hosts": [{"name": "../etc"}]}', "hosts[0]: host name '../etc' is not usable"),
    ("[]", "not a readable manifest"),
    ("{", "not a readable manifest"),
])
def test_malformed_manifest_is_a_usage_error(bundle, manifest, why):
    (bundle / "manifest.json").write_text(manifest)
    with pytest.raises(RunDirError) as info:
        read_manifest_hosts(bundle)
    assert why in str(info.value) and "manifest.json" in str(info.value)


def test_parent_of_runs_and_empty_host_folders_are_never_pass(tmp_path):
    """Issue 12.2: ``--replay runs/`` is a usage error; an empty host folder is ERROR, never PASS."""
    runs = tmp_path / "runs"
    first = _replay(SAMPLE, runs).run_dir
    proc = subprocess.run([sys.executable, "-m", "healthcheck", "run", "--replay", str(runs), "--out",
                           str(tmp_path / "again")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"healthcheck: {runs} holds run directories, not one run: replay one of them, " \
                                  f"e.g. {first}"
    empty = tmp_path / "empty"
    (empty / "raw" / "n1").mkdir(parents=True)
    (empty / "raw" / "n2").mkdir()
    (empty / "raw" / "n2" / "uname-r.out").write_text("6.1.0\n")
    hosts = read_bundle(empty)
    assert hosts["n1"].transport_error == "no collected output in raw/n1/ (no <command_id>.out files)"
    assert hosts["n2"].transport_error is None
    outcome = _replay(empty, tmp_path / "runs2")
    assert outcome.results.hosts["n1"].verdict.value == "ERROR"


def test_only_a_run_that_ran_no_probe_replays_without_probes(bundle, tmp_path):
    """A benchmark-only run (``healthcheck bench``: its manifest lists no command) replays without probes,
    so its host folders without outputs are no ERROR; a hand-made or forged manifest changes nothing."""
    run = _replay(bundle, tmp_path / "runs", copy_raw=True).run_dir
    assert not ran_no_probes(run) and not ran_no_probes(bundle)
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "commands": [], "commands_by_profile": {}}))
    assert ran_no_probes(run)
    for host in HOSTS:
        for out in (run / "raw" / host).glob("*.out"):
            out.unlink()
    again = _replay(run, tmp_path / "runs2")
    assert again.results.run["probes"] == []
    assert not [f for h in again.results.hosts.values() for f in h.findings if f.check == "host.reachable"
                and f.status.value == "ERROR"]
    (run / "manifest.json").write_text(json.dumps({"commands": [], "commands_by_profile": {}}))  # not ours
    assert not ran_no_probes(run)


def test_half_written_host_of_a_killed_run_is_not_graded_reachable(bundle, tmp_path):
    """Issue 13.3: a folder without _host.json inside a run directory we wrote is incomplete."""
    run = _replay(bundle, tmp_path / "runs", copy_raw=True).run_dir  # a run directory holding its raw/
    (run / "raw" / "h100-node04" / "_host.json").unlink()  # how a run killed before this change left it
    (run / "raw" / ".partial-123-0").mkdir()  # a host being written when the run was killed: ignored
    (run / "raw" / ".partial-123-0" / "hostname.out").write_text("h100-node09\n")
    again = _replay(run, tmp_path / "runs2")
    reach = _checks(again.results, "h100-node04")["host.reachable"][0]
    assert reach.status.value == "ERROR" and "incomplete" in reach.message
    assert ".partial-123-0" not in again.results.hosts and "h100-node09" not in again.results.hosts


def test_replayed_run_keeps_jobs_copied_as_regular_files(tmp_path):
    bundle = tmp_path / "b"
    (bundle / "raw" / "n1").mkdir(parents=True)
    (bundle / "raw" / "n1" / "uname-r.out").write_text("6.1.0\n")
    (bundle / "raw" / "_jobs").mkdir()
    (bundle / "raw" / "_jobs" / "notes.txt").write_text("kept\n")
    (bundle / "raw" / "_jobs" / "link.out").symlink_to(bundle / "raw" / "_jobs" / "notes.txt")
    outcome = _replay(bundle, tmp_path / "runs")
    jobs = outcome.run_dir / "raw" / "_jobs"
    assert sorted(p.name for p in jobs.iterdir()) == ["notes.txt"]
    assert json.dumps([f.message for f in outcome.results.hosts["n1"].findings if f.check == "replay.bundle"]) \
        == json.dumps(["bundle entries refused (a bundle is untrusted, links are never followed): "
                       "raw/_jobs/link.out: a symbolic link, not followed"])


def test_read_regular_reads_whole_files_and_cuts_at_the_limit(tmp_path):
    from healthcheck.store.bundle import read_bundle_host
    from healthcheck.store.safeio import BundleFileError, read_regular

    big = bytes(range(256)) * 1000  # 256,000 bytes: more than one sized read
    (tmp_path / "big.out").write_bytes(big)
    (tmp_path / "empty.out").write_bytes(b"")
    assert read_regular(tmp_path / "big.out") == (big, False)
    assert read_regular(tmp_path / "big.out", limit=100_000) == (big[:100_000], True)
    assert read_regular(tmp_path / "big.out", limit=len(big)) == (big, False)
    assert read_regular(tmp_path / "empty.out") == (b"", False)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert read_regular("big.out", 10, fd) == (big[:10], True)
        os.symlink("big.out", tmp_path / "link.out")
        with pytest.raises(BundleFileError, match="symbolic link"):
            read_regular("link.out", dir_fd=fd)
    finally:
        os.close(fd)
    (tmp_path / "file").write_text("not a folder")
    for name in ("file", "missing", "link.out"):
        assert "is a symbolic link or not a folder" in read_bundle_host(tmp_path, name).transport_error


def _handed_over(bundle: Path, tmp_path: Path, target: str | Path) -> Path:
    """A replayed run directory as someone else could hand it over: its raw/_source.json names ``target``."""
    run = _replay(bundle, tmp_path / "runs", render=True).run_dir
    (run / "raw" / "_source.json").write_text(json.dumps({"raw": str(target)}))
    return run


def _forged_targets(bundle: Path, tmp_path: Path) -> dict[str, tuple[Path, str]]:
    (tmp_path / "outside" / "raw" / "etc").mkdir(parents=True)  # a folder named raw, with a host-like folder
    (tmp_path / "outside" / "raw" / "etc" / "passwd.out").write_text(SECRET + "\n")
    (tmp_path / "linked").symlink_to(bundle)
    return {
        "etc": (Path("/etc"), "/etc is a system directory, never a bundle"),
        "system-subfolder": (Path("/usr/lib"), "/usr/lib is a system directory, never a bundle"),
        "symlink": (tmp_path / "linked" / "raw", f"{tmp_path / 'linked' / 'raw'} passes through a symbolic link "
                                                 f"(it resolves to {bundle / 'raw'}); links are never followed"),
        "missing": (tmp_path / "gone" / "raw", f"{tmp_path / 'gone' / 'raw'} does not exist (the bundle this run "
                                               "re-graded was moved or deleted)"),
        "not-raw": (bundle, f"{bundle} is not a bundle's raw/ folder"),
        "relative": (Path("bundle/raw"), "'raw' is not an absolute, normalised path: 'bundle/raw'"),
    }


@pytest.mark.parametrize("case", ["etc", "system-subfolder", "symlink", "missing", "not-raw", "relative"])
def test_forged_source_reference_is_refused_naming_the_file(bundle, tmp_path, case):
    """A run directory from someone else can point raw/_source.json anywhere: replay refuses it (exit 2,
    naming the file), the report renders without reading there, and rerun/merge are never led by it."""
    from click.testing import CliRunner

    from healthcheck.cli.main import main
    from healthcheck.ops.merge import merge_bundles
    from healthcheck.reports.digest import load_digest
    from healthcheck.store.rundir import raw_dir

    target, why = _forged_targets(bundle, tmp_path)[case]
    run = _handed_over(bundle, tmp_path, target)
    ref = run / "raw" / "_source.json"
    message = f"{ref}: refused: {why}" if case == "relative" else f"{ref}: refused: {target} {why.split(' ', 1)[1]}"
    with pytest.raises(RunDirError) as refused:
        raw_dir(run)
    assert str(refused.value) == message
    replay = CliRunner().invoke(main, ["run", "--replay", str(run), "--run-dir", str(tmp_path / "again")])
    assert replay.exit_code == 2, replay.output
    assert replay.output.strip() == f"healthcheck: {message}"
    assert load_digest(run).raw_excerpt("h100-node01", "hostname") is None  # nothing read from the target
    report = CliRunner().invoke(main, ["report", str(run)])
    assert report.exit_code == 0, report.output
    assert SECRET not in (run / "report.html").read_text()
    assert "node bundle is gone" not in report.output   # not a merged run: no reference of a host to name
    merged = merge_bundles([run, bundle], tmp_path / "merged", render=False)
    assert f"{ref}: a replayed or merged run refers to other bundles' outputs; merge does not follow it: " \
           "give those bundles as sources" in merged.skipped
    assert {p["source"] for p in merged.provenance.values()} == {str(bundle / "raw" / h) for h in HOSTS}


def test_forged_reference_to_a_folder_named_raw_reads_only_a_bundle(bundle, tmp_path):
    """A folder named raw whose host folders hold outputs is a bundle; any other is refused, and the
    reference file itself is read as untrusted (a link is refused, never followed)."""
    from healthcheck.store.rundir import raw_dir

    (tmp_path / "outside" / "raw").mkdir()
    (tmp_path / "outside" / "raw" / "notes").mkdir()
    (tmp_path / "outside" / "raw" / "notes" / "id_key").write_text(SECRET + "\n")
    run = _handed_over(bundle, tmp_path, tmp_path / "outside" / "raw")
    with pytest.raises(RunDirError, match=r"holds no host folders with outputs .*: not a bundle$"):
        raw_dir(run)
    (tmp_path / "elsewhere.json").write_text(json.dumps({"raw": str((bundle / "raw").resolve())}))
    (run / "raw" / "_source.json").unlink()
    (run / "raw" / "_source.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(RunDirError, match=r"_source.json: refused: is a symbolic link"):
        raw_dir(run)
    (run / "raw" / "_source.json").unlink()
    (run / "raw" / "_source.json").write_text(json.dumps({"raw": str((bundle / "raw").resolve())}))
    assert raw_dir(run) == (bundle / "raw").resolve()  # what a replay writes is followed, one hop


def test_bundle_that_cannot_be_referenced_is_copied_through_the_untrusted_reader(tmp_path):
    """A hand-made bundle without raw/ cannot be followed back by the rule above: its outputs are copied
    (regular files only), so the replay is a bundle on its own."""
    (tmp_path / "b" / "n1").mkdir(parents=True)
    (tmp_path / "b" / "n1" / "uname-r.out").write_text("6.1.0\n")
    (tmp_path / "b" / "n1" / "link.out").symlink_to(tmp_path / "b" / "n1" / "uname-r.out")
    outcome = _replay(tmp_path / "b", tmp_path / "runs")
    raw = outcome.run_dir / "raw"
    assert not (raw / "_source.json").exists()
    assert sorted(p.name for p in (raw / "n1").iterdir()) == ["uname-r.out"]
    again = _replay(outcome.run_dir, tmp_path / "runs2")
    assert sorted(again.results.hosts) == ["n1"]
    assert json.loads((again.run_dir / "raw" / "_source.json").read_text()) == {"raw": str(raw.resolve())}
