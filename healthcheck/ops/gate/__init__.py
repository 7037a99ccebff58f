"""The pre-job gate (``healthcheck gate``): passive probes, then active micro-tests inside a hard budget.

    outcome = run_gate(GateOptions(...))          # healthcheck.ops.gate.run

``plan`` decides which tests fit the budget and in which order they are dropped (``costs.yaml``),
``steps`` launches and grades each test, ``exec`` runs them as stoppable child processes, ``cache``
keeps recent passes, ``kubeself`` taints and labels a Kubernetes node. docs/gate.md.
"""
