"""The SSH sweep against ``pdsh -f 64`` on the loopback sshd testbed: same script, interleaved rounds.

    PYTHONPATH=$PWD python bench/ssh_sweep.py --hosts 64 --rounds 3
    PYTHONPATH=$PWD python bench/ssh_sweep.py --hosts 128 --cases paramiko,openssh,pdsh --known-hosts-lines 4000

Starts N real sshd hosts on 127.0.1.x (tests/sshhosts.py). Every case runs the SAME framed script
(``build_script`` over the sample bundle's command outputs, ``cat`` of each, ~300 KB per host) on every
host, 64 at a time, and keeps every host's output: ``paramiko`` and ``openssh`` through the project's
transports (``collect`` per host in a 64-thread pool, raw output written per host), ``pdsh`` as
``pdsh -R ssh -f 64`` with ``sh -c <script>``. Each case is a child process; wall time is monotonic,
client CPU is ``wait4`` user+sys of the case's whole process tree. Rounds are interleaved and the order
rotates each round (one warm-up round first). Checked outside the timing: every host complete, no
transport error. ``--known-hosts-lines`` pads known_hosts with other hosts' lines (the fleet-wide file).
Nothing here is asserted in tests; numbers go to docs/performance.md ("SSH client").
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SAMPLE = ROOT / "inventories" / "samples" / "h100-4node" / "raw" / "h100-node01"


def _commands(payload: Path, idle_s: float = 0) -> list:
    from healthcheck.transport.script import Command
    if idle_s:
        return [Command("idle", f"sleep {idle_s:g}", idle_s + 30)]
    return [Command(p.stem, f"cat {shlex.quote(str(p))}", 60.0) for p in sorted(payload.glob("*.out"))]


def worker(case: str, state: dict) -> None:
    """One timed case (runs in its own process)."""
    from healthcheck.core.model import Host
    from healthcheck.transport import TransportSettings, open_transport, registry_name
    commands = _commands(Path(state["payload"]), state["idle_s"])
    if state.get("poll_s"):
        from healthcheck.transport.ssh import AliveTransport
        AliveTransport._active_check_timeout = state["poll_s"]
    hosts = [Host(name=n) for n in state["hosts"]]
    out = Path(state["out"]) / case
    out.mkdir(parents=True, exist_ok=True)
    if case == "pdsh":
        from healthcheck.transport.script import build_script, new_marker
        script = build_script(commands, new_marker(), 4 << 20)
        env = {**os.environ, "PDSH_SSH_ARGS": f"-F {state['ssh_config']} -x -l%u %h", "PDSH_RCMD_TYPE": "ssh"}
        with (out / "pdsh.out").open("wb") as fh:
            subprocess.run(["pdsh", "-R", "ssh", "-f", str(state["forks"]), "-w", ",".join(state["hosts"]),
                            "sh -c " + shlex.quote(script)], stdout=fh, env=env, check=False)
        return
    transport = open_transport(registry_name("ssh", ssh_client=case),
                               TransportSettings(ssh_config=Path(state["ssh_config"])))

    def one(host: Host) -> str | None:
        got = transport.collect(host, commands, deadline_s=300)
        folder = out / host.name
        folder.mkdir(exist_ok=True)
        for cid, result in got.results.items():
            (folder / f"{cid}.out").write_bytes(result.stdout)
        return got.transport_error

    with ThreadPoolExecutor(state["forks"]) as pool:
        errors = [e for e in pool.map(one, hosts) if e]
    if hasattr(transport, "close"):
        transport.close()
    (out / "errors.json").write_text(json.dumps(errors))


def check(case: str, state: dict) -> str:
    out = Path(state["out"]) / case
    n, c = len(state["hosts"]), len(_commands(Path(state["payload"]), state["idle_s"]))
    if case == "pdsh":
        ends = (out / "pdsh.out").read_bytes().count(b" END ")
        return "ok" if ends == n * c else f"pdsh: {ends} END lines, expected {n * c}"
    errors = json.loads((out / "errors.json").read_text())
    return "ok" if not errors else f"{len(errors)} errors, e.g. {errors[0]}"


def timed(case: str, state_file: Path) -> tuple[float, float]:
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, __file__, "--worker", case, "--state", str(state_file)],
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.monotonic() - started, usage.ru_utime + usage.ru_stime


def pad_known_hosts(path: Path, lines: int) -> None:
    if lines <= 0:
        return
    have = path.read_text()
    blob = base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + os.urandom(32)).decode()
    filler = [f"[10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}]:22 ssh-ed25519 {blob}\n"
              for i in range(max(0, lines - have.count("\n")))]
    half = len(filler) // 2  # the fleet's own lines in the middle of the file
    path.write_text("".join(filler[:half]) + have + "".join(filler[half:]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--forks", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default="paramiko,openssh,pdsh")
    ap.add_argument("--known-hosts-lines", type=int, default=0)
    ap.add_argument("--idle", type=float, default=0, help="run 'sleep IDLE' instead of the payload script")
    ap.add_argument("--poll", type=float, default=0, help="paramiko socket poll interval, s (0: the default)")
    ap.add_argument("--worker")
    ap.add_argument("--state")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, json.loads(Path(args.state).read_text()))
        return
    from tests.sshhosts import SshCluster
    base = Path(tempfile.mkdtemp(prefix="hc-bench-"))
    cluster = SshCluster.start(base / "cluster", args.hosts, names=[f"node{i:03d}" for i in range(1, args.hosts + 1)])
    try:
        payload = base / "payload"
        shutil.copytree(SAMPLE, payload, ignore=shutil.ignore_patterns("*.err", "*.rc", "_*"))
        pad_known_hosts(cluster.known_hosts, args.known_hosts_lines)
        cases = args.cases.split(",")
        stats: dict[str, list[tuple[float, float]]] = {c: [] for c in cases}
        for rnd in range(args.rounds + 1):
            order = cases[rnd % len(cases):] + cases[:rnd % len(cases)]
            for case in order:
                state = {"hosts": [h.name for h in cluster.hosts], "ssh_config": str(cluster.ssh_config),
                         "payload": str(payload), "out": str(base / f"out{rnd}"), "forks": args.forks,
                         "idle_s": args.idle, "poll_s": args.poll}
                state_file = base / "state.json"
                state_file.write_text(json.dumps(state))
                wall, cpu = timed(case, state_file)
                verdict = check(case, state)
                print(f"round {rnd}{' (warm-up)' if rnd == 0 else ''} {case:<9} wall {wall:7.2f}s "
                      f"client CPU {cpu:6.2f}s ({1000 * cpu / args.hosts:6.1f} ms/host) {verdict}", flush=True)
                if rnd > 0 and verdict == "ok":
                    stats[case].append((wall, cpu))
            shutil.rmtree(base / f"out{rnd}", ignore_errors=True)
        print(f"\nN={args.hosts} forks={args.forks} known_hosts lines={cluster.known_hosts.read_text().count(chr(10))} "
              f"load={os.getloadavg()[0]:.1f} cpus={os.cpu_count()}")
        print(f"{'case':<9} {'wall min/med s':>16} {'CPU min/med s':>15} {'ms/host (med)':>14}")
        for case, runs in stats.items():
            if runs:
                walls, cpus = [w for w, _ in runs], [c for _, c in runs]
                print(f"{case:<9} {min(walls):7.2f} / {statistics.median(walls):6.2f} "
                      f"{min(cpus):6.2f} / {statistics.median(cpus):6.2f} "
                      f"{1000 * statistics.median(cpus) / args.hosts:14.1f}")
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
