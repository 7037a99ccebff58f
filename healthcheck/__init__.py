"""healthcheck: GPU-cluster health and acceptance tests.

    healthcheck run -i inventories/example.yaml --out runs/

One import namespace. An installed wheel holds ``healthcheck.probes``, ``healthcheck.benchmarks``,
``healthcheck.reports`` and ``healthcheck.inventories`` inside this package (pyproject's
``package-dir`` maps the repository's top-level ``probes/``, ``benchmarks/``, ``reports/`` and
``inventories/`` folders there). In a source checkout those folders sit beside this one, so the
checkout root is added to this package's search path: ``healthcheck.probes.gpu`` is ``probes/gpu.py``.
"""

from pathlib import Path as _Path

__version__ = "0.1.0"

_CHECKOUT = _Path(__file__).resolve().parent.parent
if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "probes" / "__init__.py").is_file():
    __path__.append(str(_CHECKOUT))  # type: ignore[name-defined]
