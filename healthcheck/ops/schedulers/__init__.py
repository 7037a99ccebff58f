"""Scheduler back-ends for ``healthcheck drain``/``resume``: Slurm and Kubernetes.

    scheduler = get_scheduler("slurm")
    scheduler.query_argv(["gpu001"])            # ["scontrol", "show", "node", "gpu001"]
    scheduler.drain_actions(plan.decisions, states)

Each back-end builds argv lists only (never a shell line); ``controller.Controller`` runs them
on this machine or on the controller host named in the inventory.
"""

from __future__ import annotations

from healthcheck.ops.schedulers.base import Action, NodeRef, Scheduler
from healthcheck.ops.schedulers.kubernetes import KUBERNETES
from healthcheck.ops.schedulers.slurm import SLURM

SCHEDULERS: dict[str, Scheduler] = {"slurm": SLURM, "kubernetes": KUBERNETES}

__all__ = ["SCHEDULERS", "Action", "NodeRef", "Scheduler", "get_scheduler"]


def get_scheduler(name: str) -> Scheduler:
    try:
        return SCHEDULERS[name]
    except KeyError:
        raise ValueError(f"unknown scheduler {name!r} ({', '.join(SCHEDULERS)})") from None
