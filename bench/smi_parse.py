"""CPU per host of the ``nvidia-smi -q -x`` report's parse and observations, the replay's largest single
step: the minimum over repeated passes, which holds up on a noisy shared VM far better than one pass.

    python bench/smi_parse.py --bundle /tmp/b200                 # a bundle of bench/sweep_replay.py
    PYTHONPATH=/tmp/base python bench/smi_parse.py --bundle /tmp/b200   # another checkout, for an A/B

Every pass parses each host's report anew (the whole-output memos are cleared, as real hosts never print
the same report); what nodes of one model print alike (the set of tags, leaf texts) stays memoized, as
in a replay. Nothing here is asserted in tests.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import healthcheck
from healthcheck.probes import parse_memo
from healthcheck.probes.gpu import parse_nvidia_smi_output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, required=True, help="a bundle built by bench/sweep_replay.py")
    parser.add_argument("--hosts", type=int, default=200, help="reports to parse in each pass")
    parser.add_argument("--passes", type=int, default=15)
    args = parser.parse_args()
    paths = sorted((args.bundle / "raw").glob("*/nvidia-smi-q-x.out"))[:args.hosts]
    texts = [p.read_bytes().decode("utf-8", errors="replace") for p in paths]
    best = float("inf")
    for _ in range(args.passes):
        parse_memo.clear(outputs_only=True)
        start = time.process_time()
        for text in texts:
            parse_nvidia_smi_output("nvidia-smi-q-x", text, 0)
        best = min(best, time.process_time() - start)
    print(f"{len(texts)} reports, best of {args.passes} passes: {best / len(texts) * 1000:.3f} CPU-ms a host "
          f"(the checkout of {Path(healthcheck.__file__).parents[1]})")


if __name__ == "__main__":
    main()
