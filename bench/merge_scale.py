"""``healthcheck merge`` of N graded node bundles vs ``healthcheck run --replay`` of the same hosts, in pairs.

    nice -n 10 python bench/merge_scale.py --hosts 1000 10000 --rounds 2 [--regrade] [--keep /tmp/hc-merge]
    nice -n 10 python bench/merge_scale.py --base /tmp/hc-merge/hc-merge10000-xxxx --rounds 2   # kept, timed again

Builds a spool as ``healthcheck node --budget 10`` leaves it on a shared directory: ``<spool>/<host>/`` with
``manifest.json``, ``results.json`` (version, probes run, the host's profile digest), the findings table,
the observation store and ``raw/<host>/`` holding the outputs of the system, gpu, topology, nvlink, fabric
and xid probes, taken round-robin from the shipped sample's four hosts (h100-node03 faulty: one host in
four FAILs, one WARNs; ``hostname.out`` says the host's own name). Each of the four kinds of host is graded
once by healthcheck (a replay of a one-host bundle, its outputs copied in, as a node grades itself) and cloned
with the host's name written into its findings, results and observations, so the merge can take every
node's grading. The spool's files are copies (a merge refuses hard links in a spool); the replay's bundle
``fleet/raw/<host>/`` holds the same outputs as hard links to one copy per kind of host.

Then, per round, in alternating order: ``healthcheck merge SPOOL -i INV`` and ``healthcheck run --replay
FLEET -i INV`` (and with ``--regrade``, ``merge --regrade``), each into a fresh run directory, under
``/usr/bin/time -v``: wall time, CPU seconds of the whole process tree (user + system, grading workers
included), peak RSS, and the load average before it started. The inventory also names 1% of hosts that
have no bundle ("no result from node"). Each run's verdict counts are printed, so merge and replay can be
compared. Nothing here is asserted. Every run has its modules' bytecode cached, as an installed healthcheck
has (``PYTHONDONTWRITEBYTECODE`` is dropped and the checkout compiled first): compiling ~200 modules per run
is not what a fleet's merge costs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from healthcheck.run.execute import execute_run  # noqa: E402  (this checkout's healthcheck)
from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions  # noqa: E402

SAMPLE = ROOT / "inventories" / "samples" / "h100-4node"
PROFILE = "h100-sxm5-8x"
PROBES = ["system", "gpu", "topology", "nvlink", "fabric", "xid"]
IDS = ("hostname", "uname-r", "os-release", "uptime", "proc-mounts", "mount-probe", "nvidia-smi-q-x",
       "nvidia-smi-topo", "nvidia-smi-nvlink-s", "nvidia-smi-nvlink-e", "fabricmanager-status", "kernel-log")
# as an installed healthcheck runs: its modules' bytecode cached (compiled once below), not compiled per run
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPATH": str(ROOT)}


def outputs(folder: Path, name: str, src: Path, link_from: Path | None = None) -> None:
    """``folder`` holding ``src``'s outputs of the budget-10 probes (copies, or hard links to ``link_from``)."""
    folder.mkdir(parents=True)
    (folder / "hostname.out").write_text(f"{name}\n")
    for cid in IDS:
        for ext in (".out", ".rc"):
            if (cid, ext) != ("hostname", ".out") and (src / f"{cid}{ext}").is_file():
                if link_from is not None:
                    os.link(link_from / f"{cid}{ext}", folder / f"{cid}{ext}")
                else:
                    shutil.copyfile(src / f"{cid}{ext}", folder / f"{cid}{ext}")
    shutil.copyfile(src / "_host.json", folder / "_host.json")


def graded_templates(base: Path) -> list[tuple[Path, str]]:
    """One graded node bundle per sample host, named by a token that clones replace."""
    templates = []
    for i, src in enumerate(sorted(p for p in (SAMPLE / "raw").iterdir() if p.is_dir())):
        token = f"zqtmpl{i}host"
        one = base / "templates" / f"in-{i}"
        outputs(one / "raw" / token, token, src)
        run = base / "templates" / f"graded-{i}"
        execute_run(RunOptions(target=TargetOptions(replay=one, profile=PROFILE),
                               selection=SelectionOptions(probes=PROBES),
                               outputs=OutputOptions(run_dir=run, render=False, copy_raw=True)))
        templates.append((run, token))
    return templates


def clone(template: Path, token: str, bundle: Path, name: str, collected_at: str) -> None:
    """``bundle`` as ``template`` graded for host ``name``: the token replaced in its findings, results and
    observations, its outputs copied."""
    bundle.mkdir(parents=True)
    swap = token.encode(), name.encode()
    member = gzip.compress(gzip.decompress((template / "observations.jsonl.gz").read_bytes()).replace(*swap),
                           compresslevel=1, mtime=0)
    (bundle / "observations.jsonl.gz").write_bytes(member)
    table = gzip.decompress((template / "findings.table.json.gz").read_bytes()).replace(*swap)
    (bundle / "findings.table.json.gz").write_bytes(gzip.compress(table, compresslevel=1, mtime=0))
    results = json.loads((template / "results.json").read_bytes().replace(*swap))
    results["hosts"][name]["observations_at"] = [0, len(member)]
    (bundle / "results.json").write_text(json.dumps(results))
    (bundle / "manifest.json").write_bytes((template / "manifest.json").read_bytes().replace(*swap))
    folder = bundle / "raw" / name
    outputs(folder, name, template / "raw" / token)
    meta = json.loads((folder / "_host.json").read_text())
    meta["collected_at"] = collected_at
    (folder / "_host.json").write_text(json.dumps(meta))


def build(base: Path, hosts: int) -> tuple[Path, Path, Path]:
    """The spool, the replay's bundle of the same hosts, and the inventory (1% more hosts, no bundle)."""
    templates = graded_templates(base)
    spool, fleet = base / "spool", base / "fleet"
    names = [f"gpu{i + 1:05d}" for i in range(hosts)]
    for i, name in enumerate(names):
        template, token = templates[i % len(templates)]
        when = f"2026-11-23T02:{(i // 60) % 60:02d}:{i % 60:02d}+00:00"
        clone(template, token, spool / name, name, when)
        outputs(fleet / "raw" / name, name, template / "raw" / token, link_from=template / "raw" / token)
        meta = json.loads((fleet / "raw" / name / "_host.json").read_text())
        (fleet / "raw" / name / "_host.json").unlink()
        (fleet / "raw" / name / "_host.json").write_text(json.dumps({**meta, "collected_at": when}))
    absent = [f"gpu{hosts + i + 1:05d}" for i in range(max(1, hosts // 100))]
    inv = base / "inv.yaml"
    inv.write_text(f"defaults: {{profile: {PROFILE}}}\nhosts:\n" + "".join(f"  {n}: {{}}\n" for n in names + absent))
    return spool, fleet, inv


def timed(argv: list[str], run: Path) -> dict[str, object]:
    timer = ["/usr/bin/time", "-v"] if Path("/usr/bin/time").exists() else []
    load = os.getloadavg()[0]
    started = time.monotonic()
    proc = subprocess.run([*timer, *argv], capture_output=True, text=True, env=ENV)
    wall = time.monotonic() - started
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    user, system = (float(m) for m in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", proc.stderr)
                    or (0, 0))
    by_verdict = {}
    if (run / "results.json").is_file():
        by_verdict = json.loads((run / "results.json").read_text())["summary"]["by_verdict"]
    merge = json.loads((run / "merge.json").read_text()) if (run / "merge.json").is_file() else {}
    files = sum(len(f) for _, _, f in os.walk(run))
    return {"wall_s": round(wall, 1), "cpu_s": round(user + system, 1), "user_s": round(user, 1),
            "sys_s": round(system, 1), "peak_rss_mb": int(rss.group(1)) // 1024 if rss else None,
            "load_before": round(load, 1), "rc": proc.returncode, "verdicts": by_verdict,
            "graded_by": merge.get("graded_by"), "files_in_run": files}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1000])
    parser.add_argument("--rounds", type=int, default=2, help="Interleaved merge/replay pairs per size.")
    parser.add_argument("--regrade", action="store_true", help="Also time 'merge --regrade' in each round.")
    parser.add_argument("--keep", type=Path, help="Keep spools and runs under this folder.")
    parser.add_argument("--base", type=Path, help="Time the runs on this folder built (and kept) by an earlier "
                        "run of this script for one --hosts size, instead of building it again.")
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "healthcheck"), str(ROOT / "probes"),
                    str(ROOT / "benchmarks"), str(ROOT / "reports")], check=False, env=ENV)
    for count in args.hosts:
        if args.base is not None:
            base = args.base
            spool, fleet, inv = base / "spool", base / "fleet", base / "inv.yaml"
            count = sum(1 for _ in spool.iterdir())
        else:
            base = Path(tempfile.mkdtemp(prefix=f"hc-merge{count}-", dir=args.keep))
            started = time.monotonic()
            spool, fleet, inv = build(base, count)
            print(json.dumps({"hosts": count, "build_s": round(time.monotonic() - started, 1)}), flush=True)
        kinds = {"merge": ["merge", str(spool), "-i", str(inv)],
                 "replay": ["run", "--replay", str(fleet), "-i", str(inv)]}
        if args.regrade:
            kinds["merge --regrade"] = [*kinds["merge"], "--regrade"]
        for round_no in range(args.rounds):
            order = list(kinds) if round_no % 2 == 0 else list(reversed(kinds))
            for kind in order:
                run = base / f"run-{kind.replace(' ', '')}-{round_no}"
                argv = [sys.executable, "-m", "healthcheck", *kinds[kind], "--run-dir", str(run)]
                print(json.dumps({"hosts": count, "round": round_no, "kind": kind, **timed(argv, run)}), flush=True)
                shutil.rmtree(run, ignore_errors=True)
        if args.keep is None and args.base is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
