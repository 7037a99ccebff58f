"""Long fuzz runs over every registered parser and evaluator (the CI tests run a few hundred each).

    python bench/fuzz.py --per-parser 10000 --seed 1 [--only bench:imb] [--hang-s 10]

Mutates real layouts (``tests/fuzzing.py``: the sample bundle, our fixtures and ../shared/corpus)
and checks the contract: parse raises only ParseError, evaluate never raises, no non-finite value is
graded anything but ERROR, everything serialises without bare NaN. Prints per-parser counts
(inputs, parse errors, parsed, breaches, slow inputs) and the first breach of each kind, with the
input saved under --save for a regression test. Slow inputs (> --slow-s) are counted, never asserted.
"""

from __future__ import annotations

import argparse
import collections
import random
import signal
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzzing import counts_by_parser, mutate, targets


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-parser", type=int, default=1000, help="inputs per parser target")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", help="label prefix, e.g. probe:gpu or bench:imb")
    ap.add_argument("--slow-s", type=float, default=2.0)
    ap.add_argument("--hang-s", type=int, default=10)
    ap.add_argument("--save", type=Path, default=Path("fuzz-breaches"))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    signal.signal(signal.SIGALRM, _alarm)
    stats: dict[str, collections.Counter] = {}
    seen: set[str] = set()
    for label, check, seeds in targets():
        if args.only and not label.startswith(args.only):
            continue
        counter = stats.setdefault(label, collections.Counter())
        for _ in range(args.per_parser):
            text = mutate(rng, rng.choice(seeds), rng.choice(seeds))
            started = time.monotonic()
            signal.alarm(args.hang_s)
            try:
                counter[check(text)] += 1
            except Hang:
                counter["hang"] += 1
                kind = f"{label}: hang"
            except Exception as exc:
                counter["breach"] += 1
                kind = f"{label}: {type(exc).__name__} at {traceback.extract_tb(exc.__traceback__)[-1][:2]}"
            else:
                kind = None
            finally:
                signal.alarm(0)
            if time.monotonic() - started > args.slow_s:
                counter["slow"] += 1
            if kind and kind not in seen:
                seen.add(kind)
                args.save.mkdir(exist_ok=True)
                path = args.save / f"breach-{len(seen)}.txt"
                path.write_text(text, errors="surrogateescape")
                print(f"BREACH {kind} (input: {path})", flush=True)
            counter["inputs"] += 1
    print(f"{'target':<52} {'inputs':>7} {'parse-error':>11} {'parsed':>7} {'breach':>6} {'hang':>4} {'slow':>4}")
    for label, c in stats.items():
        print(f"{label:<52} {c['inputs']:>7} {c['parse-error']:>11} {c['parsed']:>7} {c['breach']:>6} "
              f"{c['hang']:>4} {c['slow']:>4}")
    total = {k: sum(c[k] for c in stats.values()) for k in ("inputs", "breach", "hang", "slow")}
    per_parser = counts_by_parser({label: c["inputs"] for label, c in stats.items()})
    print(f"total {total}; inputs per parser: {per_parser}")
    return 1 if total["breach"] or total["hang"] else 0


if __name__ == "__main__":
    sys.exit(main())
