"""The SSH sweep against ``pdsh -R ssh -f 64`` on the loopback sshd testbed: same script, same key exchange.

    PYTHONPATH=$PWD python bench/ssh_sweep.py --hosts 128 --rounds 4 --cases paramiko,pdsh
    PYTHONPATH=$PWD python bench/ssh_sweep.py --hosts 64 --kex default
    PYTHONPATH=$PWD python bench/ssh_sweep.py --hosts 128 --cases paramiko,openssh,pdsh --known-hosts-lines 4000

Starts N real sshd hosts on 127.0.1.x (127.0.2.x past 254; tests/sshhosts.py), each session's HOME
the host's own folder: the login shell (bash, which sshd runs for every exec) reads no ~/.bashrc, as
on a node whose root has none (``--login-home``: this machine's, whose pyenv init costs every session
more than the whole client does and runs a ``pyenv rehash`` per session). Every case runs the SAME
framed script (``build_script`` over the sample bundle's command outputs, ``cat`` of each, ~300 KB
per host) on every host, 64 at a time, and keeps every host's output: ``paramiko`` and ``openssh``
through the project's transports (``collect`` per host in a 64-thread pool, each host written by the
run directory's own ``write_collection``), ``pdsh`` as ``pdsh -R ssh -f 64`` with ``sh -c <script>``,
its output to one file.

Key exchange: ``--kex curve25519-sha256`` (the default) writes ``KexAlgorithms curve25519-sha256``
into the ssh_config that pdsh's OpenSSH and the ``openssh`` case read, and offers paramiko only
curve25519 (``curve25519-sha256@libssh.org``, its name for the same exchange, RFC 8731); ``--kex default``
leaves each client its own preference (OpenSSH 9.x: sntrup761x25519-sha512). What each client agreed
on (``ssh -v``; paramiko's log) is checked before the timing, printed, and a mismatch with the pin stops
the bench.

Each case is a child process; wall time is monotonic, client CPU is ``wait4`` user+sys of the case's
whole process tree (the sshd and node-side processes are not in it); the 1-minute load average is
printed before each run. Rounds are interleaved and the order rotates each round (one warm-up round
first); the paramiko/pdsh ratios are printed per round. Checked outside the timing: every host
complete, no transport error. Every round's outputs stay until the end: ext4 skips inodes freed in
the last minutes when it allocates new ones (``recently_deleted``), and creating files right after
removing thousands cost several times the CPU of creating them on a settled filesystem (a nightly
sweep's retention removes old runs after the sweep, not before); for the same reason a series of
benches is run with ``--keep DIR`` and DIR removed after the last.

``--known-hosts-lines`` pads known_hosts with other hosts' lines (the fleet-wide file). ``--split``
runs the paramiko case cut short after each stage (interpreter and imports; + handshake and
authentication; + a channel and one exec of ``true``; + the whole script's output read and framed;
+ every host's files written): the differences are each stage's client CPU. ``--profile FILE`` runs
the first of ``--cases`` once under py-spy (samples of the thread holding the GIL).
Nothing here is asserted in tests; numbers go to docs/performance.md ("SSH client").
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import re
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
PINNED = "curve25519-sha256"
# --split: the paramiko case cut after each stage; differences between neighbours are each stage's cost
SPLIT = ("split:startup", "split:handshake", "split:exec", "split:collect", "paramiko")
PARAMIKO_KEX = {"curve25519-sha256": "curve25519-sha256@libssh.org"}  # paramiko's name for the same exchange


def _commands(payload: Path, idle_s: float = 0) -> list:
    from healthcheck.transport.script import Command
    if idle_s:
        return [Command("idle", f"sleep {idle_s:g}", idle_s + 30)]
    return [Command(p.stem, f"cat {shlex.quote(str(p))}", 60.0) for p in sorted(payload.glob("*.out"))]


def pin_paramiko_kex(kex: str) -> None:
    """Offer paramiko only ``kex`` (the bench's pin; the transport itself keeps paramiko's list)."""
    if kex != "default":
        from healthcheck.transport.ssh import AliveTransport
        AliveTransport._preferred_kex = (PARAMIKO_KEX.get(kex, kex),)


def worker(case: str, state: dict) -> None:
    """One timed case (runs in its own process)."""
    from healthcheck.core.model import Host
    from healthcheck.store.rundir import write_collection
    from healthcheck.transport import TransportSettings, open_transport, registry_name
    commands = _commands(Path(state["payload"]), state["idle_s"])
    if state.get("poll_s"):
        from healthcheck.transport.ssh import AliveTransport
        AliveTransport._active_check_timeout = state["poll_s"]
    pin_paramiko_kex(state["kex"])
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
    stage = case.partition(":")[2]  # split:STAGE, the paramiko case cut short (SPLIT)
    transport = open_transport(registry_name("ssh", ssh_client="paramiko" if stage else case),
                               TransportSettings(ssh_config=Path(state["ssh_config"])))
    if stage == "startup":
        (out / "errors.json").write_text("[]")
        return
    if stage == "exec":
        from healthcheck.transport.script import Command
        commands = [Command("true", "true", 10.0)]

    def one(host: Host) -> str | None:
        if stage == "handshake":
            return handshake_only(transport, host)
        got = transport.collect(host, commands, deadline_s=300)
        if not stage:
            write_collection(out, got)
        return got.transport_error

    with ThreadPoolExecutor(state["forks"]) as pool:
        errors = [e for e in pool.map(one, hosts) if e]
    if hasattr(transport, "close"):
        transport.close()
    (out / "errors.json").write_text(json.dumps(errors))


def handshake_only(transport, host) -> str | None:
    """Connect and authenticate, then close: the ``split:handshake`` stage."""
    from contextlib import ExitStack

    from healthcheck.transport.sshconfig import resolve
    try:
        with ExitStack() as stack:
            transport._handshake(resolve(host, transport.ssh_config), stack, time.monotonic() + 60, 0)
    except Exception as exc:
        return f"{host.name}: {exc}"
    return None


def check(case: str, state: dict) -> str:
    out = Path(state["out"]) / case
    n, c = len(state["hosts"]), len(_commands(Path(state["payload"]), state["idle_s"]))
    if case == "pdsh":
        ends = (out / "pdsh.out").read_bytes().count(b" END ")
        return "ok" if ends == n * c else f"pdsh: {ends} END lines, expected {n * c}"
    errors = json.loads((out / "errors.json").read_text())
    if errors:
        return f"{len(errors)} errors, e.g. {errors[0]}"
    if case.startswith("split:"):
        return "ok"
    outs = sum(1 for _ in (out / "raw").glob("*/*.out"))
    return "ok" if outs == n * c else f"{outs} .out files, expected {n * c}"


def timed(case: str, state_file: Path, profile: Path | None = None) -> tuple[float, float]:
    # bytecode cached under the testbed from the warm-up round on, as an installed package has it
    # (this checkout may run with PYTHONDONTWRITEBYTECODE=1: every module compiled at every start)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONPYCACHEPREFIX": str(state_file.parent / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    argv = [sys.executable, __file__, "--worker", case, "--state", str(state_file)]
    if profile:
        argv = ["py-spy", "record", "--gil", "--rate", "200", "--format", "raw", "-o", str(profile), "--", *argv]
    started = time.monotonic()
    proc = subprocess.Popen(argv, env=env)
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


def pin_kex(ssh_config: Path, kex: str) -> None:
    """``KexAlgorithms kex`` for every host in the ssh_config OpenSSH (pdsh's and ours) reads."""
    if kex != "default":
        ssh_config.write_text(ssh_config.read_text().replace("Host *\n", f"Host *\n  KexAlgorithms {kex}\n"))


def agreed(ssh_config: Path, host: str, kex: str) -> dict[str, str]:
    """The key exchange and cipher each client agrees on with ``host`` under the bench's ssh_config."""
    from healthcheck.core.model import Host
    from healthcheck.transport import TransportSettings, open_transport
    from healthcheck.transport.script import Command
    verbose = subprocess.run(["ssh", "-F", str(ssh_config), "-v", host, "true"], capture_output=True,
                             text=True, timeout=30, stdin=subprocess.DEVNULL).stderr
    seen: dict[str, str] = {}

    class Note(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            what, _, value = record.getMessage().partition(": ")
            if what in ("Kex", "Cipher", "MAC") and what not in seen:
                seen[what] = value

    pin_paramiko_kex(kex)
    log = logging.getLogger("paramiko.transport")
    handler, level = Note(), log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        got = open_transport("ssh", TransportSettings(ssh_config=ssh_config)).collect(
            Host(name=host), [Command("t", "true", 10)], 30)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    if got.transport_error:
        raise SystemExit(f"paramiko could not reach {host}: {got.transport_error}")
    ossh = dict(re.findall(r"debug1: (kex: algorithm|kex: server->client cipher): (\S+)", verbose))
    return {"openssh kex": ossh.get("kex: algorithm", "?"),
            "openssh cipher": ossh.get("kex: server->client cipher", "?"),
            "paramiko kex": seen.get("Kex", "?"), "paramiko cipher": seen.get("Cipher", "?"),
            "paramiko mac": seen.get("MAC", "?")}


def check_pin(kex: str, seen: dict[str, str]) -> None:
    if kex == "default":
        return
    if seen["openssh kex"] != kex or seen["paramiko kex"] != PARAMIKO_KEX.get(kex, kex):
        raise SystemExit(f"key exchange not pinned to {kex}: {seen}")


def summary(stats: dict[str, list[tuple[float, float]]], hosts: int) -> None:
    print(f"{'case':<15} {'wall min/med s':>16} {'CPU min/med s':>15} {'ms/host (med)':>14}")
    for case, runs in stats.items():
        if runs:
            walls, cpus = [w for w, _ in runs], [c for _, c in runs]
            print(f"{case:<15} {min(walls):7.2f} / {statistics.median(walls):6.2f} "
                  f"{min(cpus):6.2f} / {statistics.median(cpus):6.2f} "
                  f"{1000 * statistics.median(cpus) / hosts:14.1f}")
    ours = next((c for c in ("paramiko", "openssh") if stats.get(c)), None)
    if ours and stats.get("pdsh"):
        pairs = list(zip(stats[ours], stats["pdsh"], strict=False))
        walls = [a[0] / b[0] for a, b in pairs]
        cpus = [a[1] / b[1] for a, b in pairs]
        print(f"{ours}/pdsh per round: wall {' '.join(f'{x:.2f}' for x in walls)} (median "
              f"{statistics.median(walls):.2f}); CPU {' '.join(f'{x:.2f}' for x in cpus)} (median "
              f"{statistics.median(cpus):.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--forks", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default="paramiko,openssh,pdsh")
    ap.add_argument("--kex", default=PINNED, help=f"KexAlgorithms for every client, or 'default' [{PINNED}]")
    ap.add_argument("--known-hosts-lines", type=int, default=0)
    ap.add_argument("--keep", type=Path, help="make the testbed's folder in KEEP and leave it there (see above)")
    ap.add_argument("--login-home", action="store_true",
                    help="the sessions' HOME is this machine's (its ~/.bashrc runs in every session)")
    ap.add_argument("--idle", type=float, default=0, help="run 'sleep IDLE' instead of the payload script")
    ap.add_argument("--poll", type=float, default=0, help="paramiko socket poll interval, s (0: the default)")
    ap.add_argument("--split", action="store_true", help="where the paramiko case's client CPU goes (SPLIT)")
    ap.add_argument("--profile", type=Path, help="run the first case once under py-spy, raw stacks to this file")
    ap.add_argument("--worker")
    ap.add_argument("--state")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, json.loads(Path(args.state).read_text()))
        return
    from tests.sshhosts import SshCluster
    base = Path(tempfile.mkdtemp(prefix="hc-bench-", dir=args.keep))
    cluster = SshCluster.start(base / "cluster", args.hosts, names=[f"node{i:03d}" for i in range(1, args.hosts + 1)],
                               own_home=not args.login_home)
    try:
        payload = base / "payload"
        shutil.copytree(SAMPLE, payload, ignore=shutil.ignore_patterns("*.err", "*.rc", "_*"))
        pad_known_hosts(cluster.known_hosts, args.known_hosts_lines)
        pin_kex(cluster.ssh_config, args.kex)
        seen = agreed(cluster.ssh_config, cluster.hosts[0].name, args.kex)
        print(f"N={args.hosts} kex {args.kex}: " + ", ".join(f"{k} {v}" for k, v in seen.items()), flush=True)
        check_pin(args.kex, seen)
        cases = list(SPLIT) if args.split else args.cases.split(",")[:1 if args.profile else None]
        stats: dict[str, list[tuple[float, float]]] = {c: [] for c in cases}
        for rnd in range(1 if args.profile else args.rounds + 1):
            order = cases[rnd % len(cases):] + cases[:rnd % len(cases)]
            for case in order:
                state = {"hosts": [h.name for h in cluster.hosts], "ssh_config": str(cluster.ssh_config),
                         "payload": str(payload), "out": str(base / f"out{rnd}"), "forks": args.forks,
                         "idle_s": args.idle, "poll_s": args.poll, "kex": args.kex}
                state_file = base / "state.json"
                state_file.write_text(json.dumps(state))
                load = os.getloadavg()[0]
                wall, cpu = timed(case, state_file, args.profile)
                verdict = check(case, state)
                print(f"round {rnd}{' (warm-up)' if rnd == 0 else ''} {case:<15} load {load:4.1f} wall {wall:7.2f}s "
                      f"client CPU {cpu:6.2f}s ({1000 * cpu / args.hosts:6.1f} ms/host) {verdict}", flush=True)
                if rnd > 0 and verdict == "ok":
                    stats[case].append((wall, cpu))
        print(f"\nN={args.hosts} forks={args.forks} kex={args.kex} known_hosts lines="
              f"{cluster.known_hosts.read_text().count(chr(10))} load={os.getloadavg()[0]:.1f} cpus={os.cpu_count()}")
        summary(stats, args.hosts)
    finally:
        cluster.stop()
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
