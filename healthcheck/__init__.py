"""healthcheck: GPU-cluster health and acceptance tests.

    healthcheck run -i inventories/example.yaml --out runs/
"""

__version__ = "0.1.0"
