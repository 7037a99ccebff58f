"""healthcheck: GPU-cluster health and acceptance tests.

    healthcheck run -i inventories/example.yaml --out runs/

One import namespace. The plug-in folders ``probes/``, ``benchmarks/``, ``reports/`` and the data folder
``inventories/`` sit at the top of the repository and are this package's subpackages
(``healthcheck.probes.gpu`` is ``probes/gpu.py``): in a checkout through the links ``healthcheck/probes``
etc., in a wheel as real folders (pyproject's ``package-dir``). docs/architecture.md draws the layers.
"""

__version__ = "0.1.0"
