"""The core: plain values, extension contracts, profiles, grading and the verdict rules.

    from healthcheck.core.model import Finding, Status
    from healthcheck.core.grading import finding_from_expectation

Imports nothing else of ours (an import contract in pyproject.toml holds it): every other layer
builds on these values.
"""
