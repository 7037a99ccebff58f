"""What the isolation plan's job shapes mean to nccl-tests: their busbw expectations and the GPU beside a rail.

    busbw_expectation(profile, "nccl.all_reduce", "group")      # the profile's cluster (or pair) expectation
    rail_gpu(profile, options, "mlx5_3:1")                      # 3: the GPU a one-GPU job on that rail uses

``group`` jobs run every GPU and rail of k nodes, ``group_rail`` jobs one GPU per node pinned to one HCA
(benchmarks/isolate.py, benchmarks/plan.py). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from healthcheck.benchmarks import bench_setting
from healthcheck.core.profiles import Expectation, Profile

# Unless the profile states their expectation, it is the profile's own for 2 nodes or the cluster (``group``)
# or for one rail (``group_rail``): nccl-tests applies its busbw correction factor precisely so that busbw
# "should be independent of the number of ranks" and "reflect the speed of the hardware bottleneck"
# (NVIDIA/nccl-tests doc/PERFORMANCE.md), here the nodes' NICs or the one NIC.
DERIVED_BUSBW = {"group": ("cluster", "pair"), "group_rail": ("rail",)}


def busbw_expectation(profile: Profile, base: str, shape: str) -> Expectation | None:
    """``<base>.<shape>.busbw_gbps`` from the profile, or derived for the isolation's shapes (above)."""
    exp = profile.expect(f"{base}.{shape}.busbw_gbps")
    if exp is not None:
        return exp
    for other in DERIVED_BUSBW.get(shape, ()):
        found = profile.expect(f"{base}.{other}.busbw_gbps")
        if found is not None:
            return replace(found, key=f"{base}.{shape}.busbw_gbps",
                           source=f"{found.source}; as {found.key}: busbw does not depend on the node count "
                                  "(nccl-tests doc/PERFORMANCE.md)")
    return None


def rail_gpu(profile: Profile, options: Mapping[str, Any], rail: str) -> int:
    """The GPU a one-GPU job pinned to ``rail`` runs on: ``nccl.rail_gpus[rail]`` when the profile maps
    them (``{mlx5_0:1: 0, ...}``, from ``nvidia-smi topo -m``), else the rail's index in ``nccl.rails``."""
    mapped = bench_setting(profile, options, "nccl.rail_gpus", {}) or {}
    if isinstance(mapped, Mapping) and isinstance(mapped.get(rail), int):
        return int(mapped[rail])
    rails = [str(r) for r in bench_setting(profile, options, "nccl.rails", []) or []]
    return rails.index(rail) if rail in rails else 0
