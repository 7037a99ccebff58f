"""The plan of one run: its hosts, their profiles, the probes, each host's commands, and the manifest.

    plan = plan_run(opts)
    plan.hosts, plan.commands_for(plan.hosts[0]), plan.profile_of["gpu001"]

Hosts come from exactly one source (inventory, hostlist, replay, local, the failing hosts of an
earlier run), then ``--profile``, ``--transport`` and ``--limit`` apply. Unknown probe or benchmark
names, bad inventories and profiles raise here, before anything runs.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import healthcheck
from healthcheck import benchmarks
from healthcheck import probes as probe_registry
from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.hostvars import host_profile, plan_key
from healthcheck.core.model import Host
from healthcheck.core.profiles import EMPTY_PROFILE, Profile, available_profiles, load_profile
from healthcheck.core.spec import Probe
from healthcheck.inventory.hosts import check_host_names, expand_hostlist
from healthcheck.inventory.load import load_inventory
from healthcheck.run.fanout import plan_commands
from healthcheck.run.options import RunOptions
from healthcheck.run.selection import limit_hosts
from healthcheck.store.bundle import read_manifest_hosts, validate_bundle
from healthcheck.store.rundir import host_names
from healthcheck.transport.script import Command


@dataclass(frozen=True)
class RunPlan:
    """What a run will do, decided before anything runs."""

    mode: str                                   # replay, local or ssh (any live transport)
    hosts: list[Host]
    profiles: dict[str, Profile]                # by profile name
    probes: list[Probe]                         # the selected probes, in order
    options: dict[str, Any]                     # what the probes are given (plan, windows, profile)
    plans: dict[str, list[Command]]             # commands by plan key; "" for hosts without a profile
    profile_of: dict[str, Profile]              # each host's profile with its host vars, by host name

    def commands_for(self, host: Host) -> list[Command]:
        return self.plans.get(plan_key(host), self.plans[""])


def plan_run(opts: RunOptions) -> RunPlan:
    """The plan of ``opts``; raises on bad setup (inventory, profile, probe or benchmark names)."""
    search = profile_search(opts)
    hosts = run_hosts(opts, search)
    profiles = {name: load_profile(name, search) for name in sorted({h.profile for h in hosts if h.profile})}
    selected = probe_registry.select(opts.selection.probes, opts.selection.skip_probes)
    benchmarks.select(opts.bench.benchmarks)  # unknown names fail here, before anything runs
    # the plan reaches the probes too (DCGM diag level 3 for acceptance), whoever built the options
    options = {"kernel_log_window_h": DEFAULTS.kernel_log_window_h, "plan": opts.selection.plan,
               **opts.selection.probe_options}
    timeout_s = opts.transport.timeout_s
    plans = {name: plan_commands(selected, {**options, "profile": prof}, timeout_s)
             for name, prof in profiles.items()}
    for host in hosts:  # hosts whose mounts/services vars refine their profile (core.hostvars)
        if plan_key(host) not in plans:
            prof = host_profile(host, profiles.get(host.profile or "", EMPTY_PROFILE))
            plans[plan_key(host)] = plan_commands(selected, {**options, "profile": prof}, timeout_s)
    plans[""] = plan_commands(selected, options, timeout_s)
    profile_of = {h.name: host_profile(h, profiles.get(h.profile or "", EMPTY_PROFILE)) for h in hosts}
    return RunPlan(opts.target.mode, hosts, profiles, selected, options, plans, profile_of)


def profile_search(opts: RunOptions) -> list[Path]:
    """Where profiles are looked for: ``--profiles-dir`` folders, then ``profiles/`` beside the inventory."""
    dirs = list(opts.target.profile_dirs)
    if opts.target.inventory is not None:
        dirs.append(Path(opts.target.inventory).resolve().parent / "profiles")
    return dirs


def run_hosts(opts: RunOptions, search: Sequence[Path]) -> list[Host]:
    """The run's hosts from its one source, with ``--profile``, ``--transport`` and ``--limit`` applied."""
    target = opts.target
    if target.inventory is not None:
        hosts = list(load_inventory(target.inventory, known_profiles=available_profiles(search),
                                    max_hosts=target.max_hosts).hosts)
    elif target.hostlist:
        names = expand_hostlist(target.hostlist.split(), "--hosts", target.max_hosts)  # sinfo: one line per state
        check_host_names(names, "--hosts")  # before any connection
        hosts = [Host(name=n) for n in names]
    elif target.replay is not None:
        hosts = replay_hosts(target.replay)
    elif target.local:
        hosts = [Host(name=platform.node() or "localhost", transport="local")]
    elif target.rerun_of is not None:
        hosts = replay_hosts(target.rerun_of)  # the old run's hosts, addresses and vars
    else:
        raise ValueError("give an inventory (-i), --hosts NODESET, --replay DIR or --local")
    if target.profile:
        hosts = [replace(h, profile=target.profile) for h in hosts]
    if target.local:
        hosts = [replace(h, transport="local") for h in hosts]
    elif opts.transport.transport and target.replay is None:
        hosts = [replace(h, transport=opts.transport.transport) for h in hosts]
    if target.limit is not None:  # a rerun's list was already checked against the user's --limit
        hosts = limit_hosts(hosts, target.limit, strict=target.rerun_of is None)
    return hosts


def replay_hosts(bundle: Path) -> list[Host]:
    """Hosts of a bundle: from its manifest when it is a run directory, else its raw/ folders."""
    validate_bundle(bundle)  # a parent folder of runs, links, a folder without outputs: usage errors
    listed = read_manifest_hosts(bundle)
    return listed if listed is not None else [Host(name=name) for name in host_names(bundle)]


def manifest(opts: RunOptions, plan: RunPlan, started: datetime) -> dict[str, Any]:
    """``manifest.json``: the options, hosts, profiles as used and the command plans."""
    return {"healthcheck_version": healthcheck.__version__, "python": sys.version.split()[0],
            "started": started.isoformat(timespec="seconds"), "mode": plan.mode, "args": opts.as_manifest(),
            "hosts": [h.to_json() for h in plan.hosts],
            "profiles": {n: {"path": p.path, "expectations": {k: asdict(e) for k, e in p.expectations.items()}}
                         for n, p in plan.profiles.items()},
            "commands": _commands(plan.plans[""]),
            "commands_by_profile": {name: _commands(cmds) for name, cmds in plan.plans.items() if name}}


def _commands(commands: Sequence[Command]) -> list[dict[str, Any]]:
    return [{"id": c.id, "line": c.line, "timeout_s": c.timeout_s} for c in commands]


def host_profiles(hosts: Sequence[Host], profiles: Mapping[str, Profile]) -> dict[str, Profile]:
    """Each host's plain profile (no host vars), by host name: what benchmarks grade against."""
    return {h.name: profiles.get(h.profile or "", EMPTY_PROFILE) for h in hosts}
