"""The cyclic garbage collector paused while a run's results are loaded.

    with gc_paused():
        results = RunResults.from_json(json.loads(text))

Loading 10,000 hosts allocates a few million objects (the JSON document, one ``Finding`` per row of the
findings table), none of them in a reference cycle; every 700 allocations the collector would walk the
young objects and every few collections all of them, about a third of the load's CPU. Reference
counting still frees everything as usual; the collector resumes (if it was running) on exit.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic collector for the block; nesting is safe (only the outermost resumes it)."""
    running = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if running:
            gc.enable()
