"""Did-you-mean for a name an operator typed, in one wording wherever a name is looked up (profiles,
probes, benchmarks, reporters, transports, inventory vars and groups, ``--limit`` names).

    did_you_mean("h100-sxm5-8", ["h100-sxm5-8x", "a100-sxm4-80gb-8x"])   # " (did you mean 'h100-sxm5-8x'?)"
    did_you_mean("zzz", ["a", "b"])                                       # ""
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(name: str, known: Iterable[str], n: int = 1, cutoff: float = 0.6) -> list[str]:
    """Up to ``n`` known names close to ``name`` (difflib's ratio, as ``get_close_matches``), closest
    first and equally close ones in name order."""
    matcher = difflib.SequenceMatcher(b=str(name))
    scored = []
    for candidate in set(map(str, known)):
        matcher.set_seq1(candidate)
        if matcher.real_quick_ratio() >= cutoff and matcher.quick_ratio() >= cutoff \
                and (ratio := matcher.ratio()) >= cutoff:
            scored.append((-ratio, candidate))
    return [candidate for _, candidate in sorted(scored)[:n]]


def did_you_mean(name: str, known: Iterable[str], n: int = 1) -> str:
    """`` (did you mean 'x'?)`` (or ``'x' or 'y'``) for the closest known names; empty when none is close."""
    close = closest(name, known, n)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
