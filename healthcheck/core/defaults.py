"""Every tunable default in one typed table; imports nothing from the project.

    from healthcheck.core.defaults import DEFAULTS
    DEFAULTS.forks  # 64
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Defaults:
    forks: int = 64                      # hosts in flight at once
    connect_timeout_s: float = 10.0      # TCP connect + SSH handshake + auth
    server_alive_interval_s: float = 15.0  # keepalive after this much silence (ssh_config wins)
    server_alive_count_max: int = 3      # unanswered keepalives before the connection counts as lost
    ssh_read_linger_s: float = 0.2       # paramiko client, session output: after a short read, wait this
                                         # long for the rest of the burst (one wake-up, not one per packet)
    session_start_s: float = 60.0        # sshd answering the exec request: PAM and logind (pam_systemd waits
                                         # 25 s for logind), an automounted home; past it the node is hung
    jump_handshakes: int = 8             # target handshakes in flight through one jump host
    handshake_attempts: int = 6          # tries of a handshake the sshd dropped (MaxStartups), with backoff
    command_timeout_s: float = 60.0      # per command, enforced on the node with `timeout`
    kill_after_s: float = 5.0            # `timeout -k`: SIGKILL this long after SIGTERM
    host_deadline_margin_s: float = 30.0  # host deadline = sum of command timeouts + this
    silence_margin_s: float = 10.0       # a host silent for its running command's timeout + kill-after
                                         # + this is stuck: ended, keeping what arrived
    output_cap_bytes: int = 4 * 1024 * 1024  # per command stream (stdout, stderr)
    kernel_log_window_h: float = 24.0    # Xid look-back window
    max_hosts: int = 50_000              # hosts one inventory or nodeset may expand to (--max-hosts raises it)
    inventory_max_bytes: int = 16 * 1024 * 1024  # an inventory file larger than this is refused
    inventory_max_values: int = 1_000_000  # YAML values with aliases (*ref) expanded: bounds alias bombs
    inventory_max_depth: int = 64        # YAML nesting depth
    interrupt_grace_s: float = 10.0      # Ctrl-C/SIGTERM: hosts in flight get this long to finish
    merge_clock_skew_s: float = 300.0    # merge: a node's collected_at further in the future than this is not believed
    merge_max_age_days: float = 3650.0   # merge: ... nor one older than this (a node clock reset to 1970)
    drain_max_fraction: float = 0.10     # circuit breaker: most of the fleet drained at once
    drain_broken_run_fraction: float = 0.5  # a run with this share of ERROR hosts looks broken
    busbw_excellent: float = 0.80        # fraction of expected busbw
    busbw_acceptable: float = 0.60
    busbw_warn: float = 0.50
    bench_job_timeout_s: float = 1800.0  # one benchmark job (mpirun/srun), hung -> ERROR
    bench_parallel_jobs: int = 16        # benchmark jobs on disjoint hosts launched at once
    bench_pair_rounds: int = 3           # pair rounds in the acceptance plan (partners per node)
    hpl_fleet_slow_fraction: float = 0.05  # HPL node slower than best by this -> WARN (DeepOps 1.05)
    clock_event_max_fraction: float = 0.90  # slowdown flag with SM clock >= this share of max: not confirmed
    clock_event_load_pct: int = 50       # utilization at/above which a flag with unknown clocks counts as under load
    hpl_above_peak_ratio: float = 1.10   # HPL above this share of Rpeak: wrong expectation or misparse -> ERROR
    history_keep_days: int = 30
    grade_workers: int = 0               # replay grading processes; 0: one per CPU core
    grade_pool_min_hosts: int = 64       # smaller replays grade in-process (forking costs more)
    grade_host_timeout_s: float = 60.0   # one host's parsing and grading; past it the probe is ERROR, the sweep goes on
    regression_baseline_runs: int = 5
    regression_drop_fraction: float = 0.10
    evidence_timeout_s: float = 300.0    # nvidia-bug-report.sh on a failing host (--collect-evidence)
    report_timeout_s: float = 1800.0     # a report written by a forked child (healthcheck.run.forked), killed after
    evidence_max_bytes: int = 64 * 1024 * 1024  # the report kept per host; larger ones are truncated
    offender_failures: int = 3           # repeat offender: failing on this many ...
    offender_window: int = 5             # ... of the host's last this many runs (this one included)
    sibling_fail_fraction: float = 0.80  # a GPU (or copy path) below this share of its node siblings' median: FAIL
    sibling_warn_fraction: float = 0.90  # ... below this share: WARN
    gate_budget_s: float = 60.0          # `healthcheck gate`: the whole gate, passive probes and active tests
    gate_passive_budget_s: float = 10.0  # ... the declared cost of the job-safe passive probes it may run
    gate_reserve_s: float = 5.0          # ... kept for startup, grading, the bundle and the scheduler update
    gate_kill_grace_s: float = 2.0       # ... a test past its time gets SIGTERM, then SIGKILL this much later
    gate_cache_minutes: float = 30.0     # ... a passing active test is reused for this long (0: never)
    fabric_outlier_factor: float = 10.0  # fleet.fabric_counters: a port's rate since boot above this many times
                                         # the fleet median of that counter (counters with no public threshold)
    fabric_outlier_min_count: int = 1000  # ... and at least this many events since boot (noise floor)
    fabric_fleet_min_hosts: int = 3      # ... compared only across at least this many hosts of a profile


DEFAULTS = Defaults()
