"""nccl-tests ``all_reduce_perf`` output for any set of hosts and any busbw, in a real layout.

    text = render_all_reduce(["gpu001", "gpu002", "gpu003"], gpus_per_host=8, busbw_gbps=371.4)

The layout is the one of our fixture ``tests/fixtures/nccl-tests/all_reduce-h100-4node-32gpu-healthy-
371GBs-8G-16G.txt`` (itself the corpus 2-node H100 layout ``nccl-tests/all_reduce-h100-2node-16gpu-oci-
bm-gpu-h100-8-roce-16hca-465GBs-1G-16G.txt`` extended to 4 nodes): its header and table-header lines
are taken from that file, one ``#  Rank`` line per GPU in its format, and two rows (8 GiB, 16 GiB)
whose algbw and time follow from busbw by nccl-tests' own all_reduce factor 2(n-1)/n
(doc/PERFORMANCE.md), #wrong 0, then the out-of-bounds and average lines. Used by the isolation
tests to store job outputs that follow the simulator's model (bench/isolation_sim.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from tests.conftest import fixture_text

LAYOUT = "nccl-tests/all_reduce-h100-4node-32gpu-healthy-371GBs-8G-16G.txt"
_BUS = (0x0F, 0x2D, 0x44, 0x5B, 0x89, 0xA8, 0xC0, 0xD8)


def _layout_parts() -> tuple[list[str], str, list[str]]:
    lines = fixture_text(LAYOUT).splitlines()[1:]  # line 1 says it is our fixture
    head = lines[:lines.index("# Using devices") + 1]
    device = next(line for line in lines if line.startswith("#  Rank"))
    table = [line for line in lines if line.startswith("#") and ("size" in line or "(B)" in line
                                                                 or "out-of-place" in line)]
    return head, device, table


def render_all_reduce(hosts: Sequence[str], gpus_per_host: int, busbw_gbps: float, first_gpu: int = 0) -> str:
    head, _, table = _layout_parts()
    ranks = len(hosts) * gpus_per_host
    out = list(head)
    for i, host in enumerate(hosts):
        for g in range(gpus_per_host):
            gpu = first_gpu + g
            out.append(f"#  Rank {i * gpus_per_host + g:2d} Group  0 Pid {1274 + 1041 * i + g:6d} on {host:>11} "
                       f"device {gpu:2d} [0x{_BUS[gpu % 8]:02x}] NVIDIA H100 80GB HBM3")
    out += ["#", *table]
    factor = 2 * (ranks - 1) / ranks
    values = []
    for size, scale in ((8589934592, 0.9915), (17179869184, 1.0)):
        busbw = busbw_gbps * scale
        algbw = busbw / factor
        time_us = size / (algbw * 1e3)
        values.append(busbw)
        row = (f"{size:12d} {size // 4:13d}     float     sum      -1 {time_us:8.0f} {algbw:7.2f} {busbw:7.2f}      0 "
               f"{time_us * 1.0003:8.0f} {algbw * 0.9997:7.2f} {busbw * 0.9997:7.2f}      0")
        out.append(row)
    out += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {sum(values) / 2:.3f} ", "#", ""]
    return "\n".join(out)
