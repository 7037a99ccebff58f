#!/bin/sh
# Slurm HealthCheckProgram / Epilog wrapper for `healthcheck node --slurm-self`.
# In slurm.conf:
#   HealthCheckProgram=/etc/slurm/healthcheck.sh
#   HealthCheckInterval=300
#   HealthCheckNodeState=ANY,CYCLE
#   Epilog=/etc/slurm/healthcheck.sh          (optional: check the node after every job)
# slurmd runs it as root with an empty environment apart from SLURMD_NODENAME, so PATH is set here.
# It always exits 0: healthcheck drains the node itself with a "healthcheck: <check> ..." reason, and a
# failing Epilog would make slurmd drain it a second time with a reason that hides ours.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
# Defaults, then the site's HEALTHCHECK_NODE_<OPTION> values (HEALTHCHECK_NODE_PROFILE=h100-sxm5-8x, ...),
# which `healthcheck node` reads from the environment itself.
HEALTHCHECK_NODE_OUT=/var/spool/healthcheck
HEALTHCHECK_NODE_BUDGET=10
set -a
[ -r /etc/default/healthcheck ] && . /etc/default/healthcheck
set +a
export HEALTHCHECK_NODE_OUT HEALTHCHECK_NODE_BUDGET
healthcheck node --slurm-self >>"${HEALTHCHECK_NODE_LOG:-/var/log/healthcheck-node.log}" 2>&1
exit 0
