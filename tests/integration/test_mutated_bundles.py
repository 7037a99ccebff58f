"""Replay of mutated capture bundles (issue 13.5, 13.6): every mutation ends as findings or a usage
error (``RunDirError``, exit 2), never a traceback; nothing from outside the bundle is read or copied.

The base is a two-host bundle cut from the built-in sample (system probe only, to keep each replay
short); each case applies 1-3 structural mutations: malformed JSON of every shape in manifest.json,
_host.json and raw/_jobs/manifest.json, bad .rc files, links (out of the bundle, loops), FIFOs,
folders where files belong, empty host folders. ``BUNDLE_MUTATIONS`` sets the count (default 100).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest

from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions
from healthcheck.store.rundir import RunDirError

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "inventories" / "samples" / "h100-4node"
CASES = int(os.environ.get("BUNDLE_MUTATIONS", "100"))
SECRET = "OUTSIDE-THE-BUNDLE-7f3a"
SHAPES = [None, [], {}, 1, "x", [1], [{}], {"hosts": None}, {"hosts": 1}, {"hosts": [1]}, {"hosts": [{}]},
          {"hosts": [{"name": 7}]}, {"hosts": [{"name": "h100-node01", "vars": [1]}]},
          {"hosts": [{"name": "h100-node01", "port": "x"}]}, {"hosts": [{"name": "../../etc"}]},
          {"hosts": [{"name": "h100-node01", "colour": 1}]}, {"commands": []}, {"commands": {"uptime": 3}},
          {"commands": {"uptime": {"duration_s": "x"}}}, {"transport_error": 5}, {"duration_s": float("nan")},
          {"jobs": 1}, {"jobs": [{"job": {}}]}, {"jobs": [{"job": {"job_id": "nccl-x-node-h100-node01"}}]}]
TEXTS = ["", "{", "\xff\xfe", "[" * 5000, "0", "-1", "x", "1e3", "99999999999999999999", " 3 \n", "\x00"]


def _base(tmp: Path) -> Path:
    bundle = tmp / "base"
    for host in ("h100-node01", "h100-node03"):
        shutil.copytree(SAMPLE / "raw" / host, bundle / "raw" / host)
    manifest = json.loads((SAMPLE / "manifest.json").read_text())
    # no profile: each replay then skips loading the profile YAML (the mutations are structural)
    manifest["hosts"] = [{**h, "profile": None} for h in manifest["hosts"]
                         if h["name"] in ("h100-node01", "h100-node03")]
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    (bundle / "raw" / "_jobs").mkdir()
    (bundle / "raw" / "_jobs" / "nccl-all_reduce_perf-node-h100-node01.out").write_text("# nThread 1\n")
    (bundle / "raw" / "_jobs" / "manifest.json").write_text('{"jobs": []}')
    (tmp / "outside").mkdir()
    (tmp / "outside" / "secret.out").write_text(SECRET + "\n")
    return bundle


def _files(bundle: Path) -> list[Path]:
    return [p for p in bundle.rglob("*") if not p.is_symlink()]


def _replace(path: Path, rng: random.Random, outside: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    kind = rng.randrange(6)
    if kind == 0:
        path.symlink_to(outside / "secret.out")
    elif kind == 1:
        path.symlink_to(outside)
    elif kind == 2:
        path.symlink_to(path.parent)  # a loop
    elif kind == 3:
        os.mkfifo(path)
    elif kind == 4:
        path.mkdir()
    # kind 5: removed


def mutate(bundle: Path, rng: random.Random, outside: Path) -> None:
    for _ in range(rng.randint(1, 3)):
        files = _files(bundle)
        target = rng.choice(files)
        kind = rng.randrange(5)
        jsons = [p for p in files if p.suffix == ".json" and p.is_file()]
        if kind == 0 and jsons:
            shape = rng.choice(SHAPES)
            rng.choice(jsons).write_text(json.dumps(shape) if rng.random() < 0.8 else rng.choice(TEXTS))
        elif kind == 1:
            rcs = [p for p in files if p.suffix == ".rc" and p.is_file()]
            if rcs:
                rng.choice(rcs).write_bytes(rng.choice(TEXTS).encode("utf-8", "surrogateescape"))
        elif kind == 2 and target != bundle / "raw":
            _replace(target, rng, outside)
        elif kind == 3:
            hosts = [p for p in (bundle / "raw").iterdir() if p.is_dir() and not p.is_symlink()] \
                if (bundle / "raw").is_dir() and not (bundle / "raw").is_symlink() else []
            if hosts:
                host = rng.choice(hosts)
                for child in list(host.iterdir()):
                    if rng.random() < 0.7:
                        _replace(child, rng, outside) if rng.random() < 0.2 else \
                            (shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink())
        else:
            _replace(rng.choice([bundle / "raw", bundle / "manifest.json", bundle / "raw" / "_jobs"]), rng, outside)


def _walk_text(run_dir: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink())


def test_mutated_bundles_replay_to_findings_or_a_usage_error(tmp_path):
    base = _base(tmp_path)
    rng = random.Random(20261123)
    outcomes = {"replayed": 0, "usage error": 0}
    for case in range(CASES):
        bundle = tmp_path / f"case{case}"
        shutil.copytree(base, bundle, symlinks=True)
        mutate(bundle, rng, tmp_path / "outside")
        try:
            outcome = execute_run(RunOptions(target=TargetOptions(replay=bundle),
                                             outputs=OutputOptions(out=tmp_path / "runs", render=False),
                                             selection=SelectionOptions(probes=["system"])))
        except RunDirError:
            outcomes["usage error"] += 1
            continue
        except Exception as exc:  # pragma: no cover - the failure message names the case to reproduce
            pytest.fail(f"case {case}: {type(exc).__name__}: {exc}")
        outcomes["replayed"] += 1
        assert (outcome.run_dir / "results.json").is_file(), case
        assert SECRET not in _walk_text(outcome.run_dir), f"case {case}: content from outside the bundle"
        assert not any(p.is_symlink() for p in outcome.run_dir.rglob("*")), case
        for name, host in outcome.results.hosts.items():
            if host.verdict.value == "PASS":  # never PASS for a host folder without collected output
                [reach] = [f for f in host.findings if f.check == "host.reachable"]
                assert not reach.message.startswith("0 commands"), (case, name)
        shutil.rmtree(bundle, ignore_errors=True)
    assert outcomes["replayed"] > CASES // 3 and outcomes["usage error"] > 0, outcomes
