"""One run, end to end: plan, live or replayed sweep, per-host grading, post-sweep stages, outputs.

    outcome = execute_run(RunOptions(...))               # healthcheck.run.execute

Joins the lower layers (transport, store, inventory) with the plug-ins (probes, benchmarks, reports).
"""
