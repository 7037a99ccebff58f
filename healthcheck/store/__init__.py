"""What a run keeps on disk and reads back: the run directory, bundles, results, findings and observations.

    results = load_results(Path("runs/latest"))          # healthcheck.store.results

Builds on ``core`` only; never imports a probe, benchmark or report.
"""
