"""One parse per command output: a bounded memo of pure text parsers, keyed on (parser, exact text).

    @shared_parser
    def parse_ib_sysfs(text: str) -> tuple[IbDevice, ...]: ...

Several probes read the same command's output: ``ib-sysfs`` (infiniband, rates, versions, and assets where
a bundle has no ``hca-ids``), ``nvidia-smi nvlink -e`` (nvlink, rates), ``pcie-aer`` (ras, rates),
``hca-ids`` (assets, and the asset diff of a sweep). Their parser is wrapped once, where it is defined, so
every reader of one host's output gets the same parse. The key is the parser and all its arguments (the
exact text, and any option such as an end marker), so a different text is always parsed again;
``ParseError`` is not cached (each reader sees it raised). A wrapped parser must return immutable values
(tuples, frozen dataclasses, ``MappingProxyType``): every caller gets the same object. The nvidia-smi
report (``probes/gpu.py``: gpu, xid, fabric, versions, pci, assets) is one of them, keyed on the result's
bytes (they keep their hash), so it is decoded once too.

Each memo holds the last ``MEMO_SIZE`` texts per parser: graded hosts are handled one after another
in a process, so the readers of one host always find its parse, and memory stays flat in the fleet
size. ``memoized(maxsize)`` is the same memo for what a parser sees again and again across hosts (one
GPU's ``nvlink`` block, a sysfs path, the ``topo -m`` matrix): healthy nodes print them identically. ``clear()`` empties
every memo (benchmarks measuring a cold parse, tests).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

MEMO_SIZE = 16  # per parser: a few hosts in flight at once, each with one output per command

F = TypeVar("F", bound=Callable[..., Any])
_MEMOS: list[Any] = []
_OUTPUT_MEMOS: list[Any] = []  # the shared_parser ones: whole command outputs


def memoized(maxsize: int, typed: bool = True) -> Callable[[F], F]:
    """A decorator: the function memoized on its arguments, at most ``maxsize`` results kept
    (``fn.__wrapped__`` is the plain function). The function must be pure and return immutable values.
    ``typed=False`` is for a function of one ``str``: its key is then the string itself, a lookup about
    twice as fast (with more or other arguments, ``1``, ``1.0`` and ``True`` would share an entry)."""
    def wrap(fn: F) -> F:
        memo = functools.lru_cache(maxsize=maxsize, typed=typed)(fn)
        _MEMOS.append(memo)
        return cast(F, memo)
    return wrap


def shared_parser(parser: F) -> F:
    """``parser`` memoized on its arguments (the exact text, any option), the last ``MEMO_SIZE`` kept."""
    memo = memoized(MEMO_SIZE)(parser)
    _OUTPUT_MEMOS.append(memo)
    return memo


def clear(outputs_only: bool = False) -> None:
    """Forget every memoized parse, or (``outputs_only``) only the whole command outputs: what a bench
    bundle of hard-linked outputs would otherwise find again on every host, and real hosts never print."""
    for memo in _OUTPUT_MEMOS if outputs_only else _MEMOS:
        memo.cache_clear()


def hits() -> dict[str, tuple[int, int]]:
    """Parser name -> (hits, misses) since the last ``clear()``."""
    return {memo.__wrapped__.__qualname__: (memo.cache_info().hits, memo.cache_info().misses) for memo in _MEMOS}
