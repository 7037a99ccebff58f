#!/bin/sh
# Slurm Prolog / Epilog wrapper for `healthcheck gate --slurm-self`: the pre-job gate.
# In slurm.conf:
#   Prolog=/etc/slurm/healthcheck-gate.sh
#   Epilog=/etc/slurm/healthcheck-gate.sh           (optional: the gate after each job refills the result cache)
#   SchedulerParameters=nohold_on_prolog_fail      (a job whose Prolog failed is requeued elsewhere, not held)
#   PrologEpilogTimeout=120                        (slurmd's own backstop, above the gate's budget)
# As Prolog: exit 0 lets the job start. Exit 1 means the node failed the gate: the gate has already drained it
# with "healthcheck: <check> <component>: ..." (slurmctld keeps a reason already set instead of "Prolog error"),
# and Slurm requeues the job. The gate's own errors (it crashed, is not installed, ran past the backstop) exit 0
# unless HEALTHCHECK_GATE_ON_ERROR=closed: by default our own error never drains a node.
# As Epilog: always exit 0 (a failing Epilog drains the node again with "Epilog error", hiding our reason); the
# gate drains by itself, and with a larger budget it runs every test and refreshes the cache for the next Prolog.
# slurmd runs it as root with no PATH (only SLURM_* variables), so PATH is set here.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
# Defaults, then the site's HEALTHCHECK_GATE_<OPTION> values (HEALTHCHECK_GATE_PROFILE=h100-sxm5-8x, ...),
# which `healthcheck gate` reads from the environment itself.
HEALTHCHECK_GATE_OUT=/var/spool/healthcheck-gate
HEALTHCHECK_GATE_BUDGET=60
HEALTHCHECK_GATE_EPILOG_BUDGET=120
HEALTHCHECK_GATE_ON_ERROR=open
set -a
[ -r /etc/default/healthcheck ] && . /etc/default/healthcheck
set +a
case "${SLURM_SCRIPT_CONTEXT:-}" in
  epilog*) HEALTHCHECK_GATE_BUDGET=$HEALTHCHECK_GATE_EPILOG_BUDGET ;;
esac
export HEALTHCHECK_GATE_OUT HEALTHCHECK_GATE_BUDGET HEALTHCHECK_GATE_ON_ERROR
log=${HEALTHCHECK_GATE_LOG:-/var/log/healthcheck-gate.log}
echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) ${SLURM_SCRIPT_CONTEXT:-gate} job ${SLURM_JOB_ID:-?} on ${SLURMD_NODENAME:-?}" >>"$log"
# The gate stops itself at its budget; timeout(1) is the backstop if Python itself cannot start or stop.
case "${HEALTHCHECK_GATE_BUDGET%.*}" in
  ''|*[!0-9]*) backstop=70 ;;
  *) backstop=$(( ${HEALTHCHECK_GATE_BUDGET%.*} + 10 )) ;;
esac
timeout -k 5 "$backstop" healthcheck gate --slurm-self >>"$log" 2>&1
rc=$?
case "${SLURM_SCRIPT_CONTEXT:-}" in
  epilog*) exit 0 ;;
esac
[ "$rc" -le 1 ] && exit "$rc"
echo "healthcheck gate: own error (exit $rc), --on-error $HEALTHCHECK_GATE_ON_ERROR" >>"$log"
[ "$HEALTHCHECK_GATE_ON_ERROR" = closed ] && exit 1
exit 0
