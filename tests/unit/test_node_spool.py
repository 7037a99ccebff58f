"""``healthcheck node`` never loses data and never stops on a write (issue 29.7): what is at OUT/<host> and is
not a bundle is refused untouched; a failed ``--prom`` keeps the bundle and the self-drain; 200 runs swapping
their bundles at once all succeed; a full disk (a file-size limit, as a full disk answers) is reported with
paths that exist afterwards, the previous bundle kept.

An ``nvidia-smi`` shim first on PATH prints our own faulty H100 fixture (gpu2 row remap pending, gpu5 at x8).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from healthcheck.ops.node import swap_in
from tests.conftest import FIXTURES, ROOT


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "nvidia-smi").write_text(
        f"#!/bin/sh\nexec cat {shlex.quote(str(FIXTURES / 'nvidia-smi-xml' / 'h100-8x-faulty.xml'))}\n")
    (folder / "nvidia-smi").chmod(0o755)
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}


def node(env: dict[str, str], out: Path, *args: str, limit_blocks: int | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "healthcheck", "node", "--out", str(out), "--host", "gpu007", "--probes", "gpu",
            "--profile", "h100-sxm5-8x", *args]
    if limit_blocks is not None:  # a file-size limit: writes past it fail (EFBIG) as on a full disk
        argv = ["sh", "-c", f"ulimit -f {limit_blocks} && exec {shlex.join(argv)}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def test_an_existing_folder_that_is_not_a_bundle_is_refused_untouched(tmp_path: Path, env: dict[str, str]) -> None:
    mine = tmp_path / "out" / "gpu007"
    (mine / "thesis").mkdir(parents=True)
    (mine / "thesis" / "chapter1.tex").write_text("years of work\n")
    proc = node(env, tmp_path / "out")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == (f"healthcheck: {mine} exists and is not a healthcheck bundle (a folder with raw/ and a "
                           "manifest.json written by healthcheck): left untouched; move it away or give another "
                           "--out\n")
    assert (mine / "thesis" / "chapter1.tex").read_text() == "years of work\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gpu007"]


def test_a_failed_prom_keeps_the_bundle_and_still_self_drains(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "a-file").write_text("")
    prom = tmp_path / "a-file" / "healthcheck.prom"   # its folder cannot be made
    scontrol = Path(env["PATH"].split(":")[0]) / "scontrol"   # a controller that cannot be reached
    scontrol.write_text("#!/bin/sh\necho 'slurm_load_node error: Unable to contact slurm controller' >&2\nexit 1\n")
    scontrol.chmod(0o755)
    proc = node(env, tmp_path / "out", "--prom", str(prom), "--slurm-self")
    assert proc.returncode == 1, proc.stderr   # the node is faulty: NHC's 1
    assert re.search(rf"^healthcheck: --prom not written: {re.escape(str(prom))}: (File exists|Not a directory) "
                     rf"\(the bundle {re.escape(str(tmp_path / 'out' / 'gpu007'))} is kept\)$", proc.stderr, re.M), \
        proc.stderr
    assert "healthcheck: slurm refused: cannot read the node's Slurm state (scontrol show node on localhost: " \
           "rc=1: slurm_load_node error: Unable to contact slurm controller)" in proc.stderr   # the self-drain ran
    results = json.loads((tmp_path / "out" / "gpu007" / "results.json").read_text())
    assert results["hosts"]["gpu007"]["verdict"] == "FAIL"
    assert (tmp_path / "out" / "gpu007" / "metrics.prom").is_file()


def _swap(args: tuple[str, str, object]) -> str:
    staging, final, barrier = args
    barrier.wait(timeout=60)  # type: ignore[attr-defined]
    try:
        swap_in(Path(staging), Path(final))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def _fake_bundle(folder: Path, n: int) -> None:
    (folder / "raw" / "gpu007").mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"healthcheck_version": "0.1.0", "n": n}))
    (folder / "raw" / "gpu007" / "hostname.out").write_text(f"gpu007 run {n}\n")


def test_two_hundred_concurrent_swaps_all_succeed(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    _fake_bundle(spool / "gpu007", -1)
    stagings = []
    for n in range(200):
        _fake_bundle(spool / f".gpu007.tmp-{n}" / "gpu007", n)
        stagings.append(spool / f".gpu007.tmp-{n}" / "gpu007")
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Manager().Barrier(200)
    with ctx.Pool(200) as pool:
        outcomes = pool.map(_swap, [(str(s), str(spool / "gpu007"), barrier) for s in stagings], chunksize=1)
    assert [o for o in outcomes if o != "ok"] == []
    final = json.loads((spool / "gpu007" / "manifest.json").read_text())["n"]
    assert (spool / "gpu007" / "raw" / "gpu007" / "hostname.out").read_text() == f"gpu007 run {final}\n"
    assert not [p.name for p in spool.iterdir() if ".old-" in p.name]   # every parked bundle removed
    assert not any(s.exists() for s in stagings)


def test_a_full_disk_names_paths_that_exist_and_keeps_the_previous_bundle(tmp_path: Path,
                                                                          env: dict[str, str]) -> None:
    out = tmp_path / "out"
    assert node(env, out).returncode == 1
    before = (out / "gpu007" / "results.json").read_bytes()
    proc = node(env, out, limit_blocks=16)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"healthcheck: cannot write the bundle of gpu007 in {out}: File too large; "
                                  f"nothing was changed: {out / 'gpu007'} (the previous bundle) is kept"), proc.stderr
    for path in re.findall(r"(/\S+?)[:;,)]?(?=\s|$)", proc.stderr):
        assert Path(path).exists(), (path, proc.stderr)
    assert (out / "gpu007" / "results.json").read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == ["gpu007"]
