"""Data shipped with healthcheck: hardware profiles (``profiles/*.yaml``), the example inventory and the
built-in sample capture bundle (``samples/h100-4node``). Read them through ``importlib.resources``
(``healthcheck.core.profiles.BUILTIN_PROFILES``, ``healthcheck.inventories.SAMPLE_BUNDLE``), never through paths
relative to a checkout."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

DATA = Path(str(files(__name__)))
SAMPLE_BUNDLE = DATA / "samples" / "h100-4node-acceptance"  # probes + benchmark jobs (issue 20)
EXAMPLE_INVENTORY = DATA / "example.yaml"
