"""known_hosts cost per host: paramiko's ``HostKeys.load`` per connection (before) against the sweep-wide
index (``healthcheck.transport.knownhosts``), at 128, 1,000 and 4,000 lines, plain and hashed.

    PYTHONPATH=$PWD python bench/known_hosts.py --lines 128,1000,4000 --lookups 200

Lines are ``[10.x.y.z]:22 ssh-ed25519 <key>`` (the layout ``ssh-keyscan``/accept-new write), hashed
with ``ssh-keygen -H`` for the hashed rows. Prints CPU ms per load and per lookup (process CPU time).
Nothing here is asserted in tests; numbers go to docs/performance.md ("SSH client").
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def make_file(path: Path, lines: int, hashed: bool) -> list[str]:
    names = [f"[10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}]:22" for i in range(lines)]
    body = "".join(f"{n} ssh-ed25519 " + base64.b64encode(
        b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + os.urandom(32)).decode() + "\n" for n in names)
    path.write_text(body)
    if hashed:
        keygen = shutil.which("ssh-keygen")
        if keygen is None:
            raise SystemExit("ssh-keygen needed for --hashed")
        subprocess.run([keygen, "-q", "-H", "-f", str(path)], check=True, capture_output=True)
    return names


def cpu_ms(fn, repeat: int) -> float:
    started = time.process_time()
    for _ in range(repeat):
        fn()
    return 1000 * (time.process_time() - started) / repeat


def main() -> None:
    import paramiko

    from healthcheck.transport.knownhosts import KnownHostsIndex
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", default="128,1000,4000")
    ap.add_argument("--lookups", type=int, default=200)
    args = ap.parse_args()
    print(f"{'lines':>6} {'hashed':>6} {'paramiko load ms':>17} {'index: parse ms (once)':>23} {'lookup ms':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for lines in (int(x) for x in args.lines.split(",")):
            for hashed in (False, True):
                path = Path(tmp) / f"kh{lines}{hashed}"
                names = make_file(path, lines, hashed)
                repeat = 1 if lines >= 4000 else 3
                load = cpu_ms(lambda p=path: paramiko.HostKeys().load(str(p)), repeat)
                index = KnownHostsIndex()
                parse = cpu_ms(lambda i=index, p=path: i.lookup([str(p)], "x"), 1)
                probe = [names[(k * 7919) % len(names)] for k in range(args.lookups)]
                started = time.process_time()
                found = [index.lookup([str(path)], name) for name in probe]
                lookup = 1000 * (time.process_time() - started) / len(probe)
                assert all(len(f) == 1 for f in found), "every name found once"
                print(f"{lines:>6} {hashed!s:>6} {load:>17.1f} {parse:>23.1f} {lookup:>10.3f}")


if __name__ == "__main__":
    main()
