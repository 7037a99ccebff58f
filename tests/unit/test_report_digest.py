"""The report digest (grouping, folding, margins, raw excerpts) on a hand-built run directory.

``make_run(tmp_path)`` is shared by the other ``test_report_*`` modules: a results.json written
by hand with our own values (no corpus), including a node whose output holds ``<script>`` and a raw
output file with non-UTF-8 bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from healthcheck.benchmarks.imb import imb_series, parse_imb
from healthcheck.benchmarks.nccl import nccl_series
from healthcheck.core.model import Finding, Status
from healthcheck.reports.digest import expected_band, expected_bounds, fold, group_findings, load_digest, margin
from healthcheck.store.jsoncodec import to_jsonable
from healthcheck.store.results import SCHEMA
from tests.conftest import fixture_text

XSS = "<script>document.title='pwned';document.body.setAttribute('data-pwned','1')</script>"
IMG_XSS = "<img src=x onerror=\"document.body.setAttribute('data-pwned','2')\">"
REMAP_REMEDY = "Reset the GPU (nvidia-smi -r) to apply the pending row remap; drain first"


def finding(host: str, check: str, status: str, message: str, **kw: Any) -> dict[str, Any]:
    return {"host": host, "check": check, "status": status, "message": message, "component": "node",
            "value": None, "expected": None, "unit": None, "remedy": None, "source": None, **kw}


def gpu(index: int, **kw: Any) -> dict[str, Any]:
    base = {"index": index, "name": "NVIDIA H100 80GB HBM3", "bus_id": f"00000000:{0x18 + index:02X}:00.0",
            "memory_total_mib": 81559, "temp_c": 35.0 + index, "slowdown_c": 87.0, "power_draw_w": 71.5,
            "power_limit_w": 700.0, "pcie_gen_current": 5, "pcie_gen_max": 5, "pcie_width_current": 16,
            "pcie_width_max": 16, "vbios": "96.00.74.00.0C",
            "ecc_volatile": {"sram_correctable": 0, "sram_uncorrectable": 0, "dram_correctable": 0,
                             "dram_uncorrectable": 0},
            "ecc_aggregate": {"sram_correctable": 0, "sram_uncorrectable": 0, "dram_correctable": 4,
                              "dram_uncorrectable": 0},
            "remap": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
            "clock_events": ["gpu_idle"]}
    return {**base, **kw}


def gpu_obs(driver: str = "550.54.15", **bad: Any) -> dict[str, Any]:
    gpus = [gpu(i, **(bad if i == 3 else {})) for i in range(8)]
    return {"source": "nvidia-smi-q-x", "gpus": gpus, "count": 8, "driver_version": driver,
            "cuda_version": "12.4"}


def job(bench: str, test: str, shape: str, hosts: list[str], metric: float | None,
        series: dict[str, Any] | None = None) -> dict[str, Any]:
    """A job summary as benchmarks/grade.py stores it in each host's observations."""
    return {"job_id": f"{bench}-{test}-{shape}-{'-'.join(hosts)}", "test": test, "shape": shape,
            "hosts": hosts, "rail": None, "retest_of": None, "rc": 0, "duration_s": 12.5, "metric": metric,
            "status": "PASS", **({"series": series} if series else {})}


def nccl_rows(scale: float) -> dict[str, Any]:
    sizes = [8, 1024, 1 << 20, 1 << 27, 1 << 30, 1 << 33]
    peak = [0.1, 5.0, 90.0, 380.0, 470.0, 480.0]
    return {"rows": [{"size_bytes": s, "oop_busbw_gbps": round(p * scale, 2),
                      "ip_busbw_gbps": round(p * scale * 0.99, 2)} for s, p in zip(sizes, peak, strict=True)]}


IMB_TEXT = fixture_text("imb/imb-pingpong-degraded-link-4.8us.txt")
PAIR_JOBS = {("gpu001", "gpu002"): job("imb", "PingPong", "pair", ["gpu001", "gpu002"], 3.1,
                                       imb_series(to_jsonable(parse_imb(IMB_TEXT)))),
             ("gpu001", "gpu003"): job("nccl", "all_reduce_perf", "pair", ["gpu001", "gpu003"], 45.5),
             ("gpu003", "gpu004"): job("nccl", "all_reduce_perf", "pair", ["gpu003", "gpu004"], 12.0)}
IMB_JOB_ID = PAIR_JOBS[("gpu001", "gpu002")]["job_id"]


def bench_obs(name: str) -> dict[str, Any]:
    scale = 0.5 if name == "gpu004" else 1.0
    out: dict[str, list] = {
        "nccl": [job("nccl", "all_reduce_perf", "node", [name], 480.0 * scale, nccl_series(nccl_rows(scale)))],
        "hpl": [job("hpl", "hpl", "node", [name], 400000.0 * (0.625 if name == "gpu004" else 1.0))]}
    for pair, summary in PAIR_JOBS.items():
        if name in pair:
            out.setdefault(summary["job_id"].split("-")[0], []).append(summary)
    return {"benchmarks": out}


TOPOLOGY = {"kind": "matrix", "columns": ["GPU0", "GPU1", "NIC0"],
            "rows": [{"device": "GPU0", "links": ["X", "NV18", "PIX"], "cpu_affinity": "0-55"},
                     {"device": "GPU1", "links": ["NV18", "X", "SYS"], "cpu_affinity": "0-55"},
                     {"device": "NIC0", "links": ["PIX", "SYS", "X"]}],
            "nic_names": {"NIC0": "mlx5_0"}}
NVLINK = {"gpus": [{"index": 3, "name": "H100", "state": "ok",
                    "links": [{"link": 4, "active": True, "speed_gbps": 26.562},
                              {"link": 5, "active": False, "speed_gbps": None}]}],
          "counters": [{"gpu": 3, "link": 4, "replay": 0, "recovery": 2, "crc": 0}], "counters_read": True}
INFINIBAND = {"source": "ibstat", "devices": [{"name": "mlx5_0", "hca_type": "MT4129", "fw_ver": "28.39.1002",
              "ports": [{"device": "mlx5_0", "port": 1, "state": "ACTIVE", "phys_state": "LinkUp",
                         "rate_gbps": 400.0, "rate_text": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand",
                         "counters": {"symbol_error": 3, "link_downed": 0}}]}]}

BUSBW_EXPECTED = ">= 60% of 480 GB/s"


def host_findings(name: str) -> list[dict[str, Any]]:
    """gpu001, gpu002, gpu017: pending remap on gpu3 (one group); gpu004 NVLink down and slow NCCL;
    gpu005 carries script injection in a message; gpu003 is clean."""
    out = [finding(name, "gpu.count", "PASS", "count 8 GPUs, within == 8", value=8, expected="== 8",
                   unit="GPUs", source="nvidia-smi-q-x")]
    if name in ("gpu001", "gpu002", "gpu017"):
        out.append(finding(name, "gpu.row_remap.pending", "FAIL", "gpu3: row remap pending", component="gpu3",
                           value=True, expected="false", remedy=REMAP_REMEDY, source="nvidia-smi-q-x"))
    if name == "gpu002":
        out.append(finding(name, "gpu.temperature", "WARN", "gpu3: temperature 84.0 C, expected <= 80 C",
                           component="gpu3", value=84.0, expected="<= 80 C", unit="C",
                           source="nvidia-smi-q-x", remedy="Check the airflow and fans of the chassis"))
    if name == "gpu004":
        out.append(finding(name, "nvlink.link.down", "FAIL", "gpu3 link 5 inactive",
                           component="gpu3 link 5", remedy="Reseat the GPU baseboard; RMA if it persists",
                           source="nvidia-smi-nvlink-s"))
    if name == "gpu005":
        out.append(finding(name, "xid.event", "FAIL", f"Xid 79 {XSS} {IMG_XSS}", component="gpu0",
                           remedy=f"Drain and RMA {XSS}", source="kernel-log"))
    if name.startswith("gpu") and name != "gpu017":
        scale = 0.5 if name == "gpu004" else 1.0
        status = "FAIL" if name == "gpu004" else "PASS"
        out.append(finding(name, "nccl.all_reduce.node.busbw", status,
                           f"all_reduce node busbw {480 * scale:.1f}", value=480.0 * scale,
                           expected=BUSBW_EXPECTED, unit="GB/s", source="nccl-node",
                           remedy="Check NVLink and NVSwitch" if status == "FAIL" else None))
    return out


HOSTS = ("gpu001", "gpu002", "gpu003", "gpu004", "gpu005", "gpu017", "node-a")


def make_run(tmp_path: Path, extra: dict[str, Any] | None = None) -> Path:
    """A run directory with results.json, manifest.json and raw outputs, written by hand."""
    run_dir = tmp_path / "run"
    hosts: dict[str, Any] = {}
    for name in HOSTS:
        if name == "node-a":
            hosts[name] = {"verdict": "ERROR", "profile": "h100-sxm5-8x", "group": "login",
                           "address": "10.0.0.9",
                           "findings": [finding(name, "run.transport", "ERROR", "ssh: connection refused",
                                                remedy="Check sshd and the network path to the node")],
                           "observations": {}}
            continue
        pending = {"remap": {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False}}
        obs: dict[str, Any] = {"gpu": gpu_obs("535.161.08" if name == "gpu005" else "550.54.15",
                                              **(pending if name in ("gpu001", "gpu002", "gpu017") else {})),
                               "system": {"hostname": name, "kernel": "5.15.0-105-generic", "os_pretty_name":
                                          "Ubuntu 22.04.4 LTS", "uptime_s": 3600.0}}
        if name != "gpu017":
            obs.update(bench_obs(name))
        if name == "gpu001":
            obs.update(topology=TOPOLOGY, infiniband=INFINIBAND)
        if name == "gpu004":
            obs["nvlink"] = NVLINK
        hosts[name] = {"verdict": "?", "profile": "h100-sxm5-8x", "group": "rack1", "address": None,
                       "findings": host_findings(name), "observations": obs}
    doc = {"schema": SCHEMA,
           "run": {"id": "20261122T031500Z", "started": "2026-11-22T03:15:00Z",
                   "finished": "2026-11-22T03:17:05Z",
                   "duration_s": 125.0, "mode": "ssh", "probes": ["gpu", "nvlink", "topology"],
                   "inventory": "inventories/lab.yaml", "version": "0.1.0"},
           "summary": {}, "hosts": hosts,
           **(extra or {})}
    raw = run_dir / "raw" / "gpu005"
    raw.mkdir(parents=True)
    (raw / "kernel-log.out").write_bytes(b"NVRM: Xid 79 \xff\xfe fallen off the bus " + XSS.encode() + b"\n")
    (run_dir / "raw" / "gpu001").mkdir()
    (run_dir / "raw" / "gpu001" / "nvidia-smi-q-x.out").write_bytes(b"<nvidia_smi_log>\n" + b"x" * 9000)
    jobs = run_dir / "raw" / "_jobs"
    jobs.mkdir()
    (jobs / f"{IMB_JOB_ID}.out").write_text(IMB_TEXT)
    (run_dir / "results.json").write_text(json.dumps(doc, indent=1))
    (run_dir / "manifest.json").write_text(json.dumps({"args": ["healthcheck", "run", "-i", "lab.yaml"],
                                                       "note": XSS}))
    return run_dir


def test_identical_findings_fold_into_one_nodeset(tmp_path: Path) -> None:
    digest = load_digest(make_run(tmp_path))
    remap = [g for g in digest.groups if g.check == "gpu.row_remap.pending"]
    assert len(remap) == 1
    assert remap[0].nodeset == "gpu[001-002,017]"
    assert remap[0].component == "gpu3"
    assert remap[0].remedy == REMAP_REMEDY
    # worst first, widest first: the three-host FAIL group leads
    assert digest.groups[0].check == "gpu.row_remap.pending"
    assert [g.status for g in digest.groups][-1] is Status.WARN


def test_verdict_counts_and_host_order(tmp_path: Path) -> None:
    digest = load_digest(make_run(tmp_path))
    by = digest.hosts_by_verdict()
    assert by[Status.FAIL] == ["gpu001", "gpu002", "gpu004", "gpu005", "gpu017"]
    assert by[Status.ERROR] == ["node-a"]
    assert by[Status.PASS] == ["gpu003"]
    assert [h.name for h in digest.hosts][:2] == ["gpu001", "gpu002"]
    assert digest.hosts[-1].name == "gpu003"
    assert digest.verdict is Status.FAIL


def test_fold_mixed_names_and_empty() -> None:
    assert fold(["gpu003", "gpu001", "gpu002", "gpu010", "login"]) == "gpu[001-003,010],login"
    assert fold([]) == ""


def test_fold_grouped_by_prefix_is_what_nodeset_folds() -> None:
    """``fold`` groups ``letters+number`` names by prefix before ClusterShell sees them: the same text as
    ``NodeSet.fromlist`` of every name, for other names (two numbers, padding mixes, odd characters) too."""
    from ClusterShell.NodeSet import NodeSet

    names = ([f"gpu{i:05d}" for i in range(1, 400, 3)] + [f"gpu{i}" for i in (1, 2, 3, 17)] + ["gpu01", "gpu001"]
             + [f"h100-node{i:02d}" for i in range(1, 9)] + [f"rack{r}-n{i}" for r in range(3) for i in range(4)]
             + ["login", "a.b-c1", "x_y2", "node-01", "node-1", "Node7", "123", "gpu1x", "cpu7"])
    for chosen in (names, names[::2], names[1::3], names[-20:], ["n[1]", "a,b", "gpu1", "gpu2"]):
        assert fold(chosen) == str(NodeSet.fromlist(sorted(set(chosen))))
    assert fold(["gpu[1", "gpu2"]) == "gpu2,gpu[1"  # a name NodeSet cannot parse: all listed plainly


def test_group_keeps_distinct_messages() -> None:
    fs = [Finding(h, "thermal.gpu_temp_c", Status.WARN, f"gpu0: temperature {t} C", component="gpu0")
          for h, t in (("a1", 84), ("a2", 85), ("a3", 84))]
    (group,) = group_findings(fs)
    assert group.nodeset == "a[1-3]"
    assert group.messages == ("gpu0: temperature 84 C", "gpu0: temperature 85 C")


@pytest.mark.parametrize(("value", "expected", "result"), [
    (91, "<= 87 C", (87 - 91) / 87),
    (500, ">= 460 GB/s", (500 - 460) / 460),
    (240.0, BUSBW_EXPECTED, (240 - 288) / 288),
    (5, "between 1 and 10", min((5 - 1) / 1, (10 - 5) / 10)),
    (8, "== 8", None),
    ("yes", ">= 1", None),
])
def test_margin(value: Any, expected: str, result: float | None) -> None:
    got = margin(Finding("h", "c", Status.FAIL, "m", value=value, expected=expected))
    assert got == pytest.approx(result) if result is not None else got is None


def test_expected_band_reads_benchmark_fractions() -> None:
    assert expected_band(BUSBW_EXPECTED) == (288.0, 480.0)
    assert expected_bounds(">= 460 GB/s") == (460.0, None)
    assert expected_band("one of a, b") is None


def test_raw_excerpt_decodes_bad_bytes_and_truncates(tmp_path: Path) -> None:
    digest = load_digest(make_run(tmp_path))
    text = digest.raw_excerpt("gpu005", "kernel-log")
    assert text is not None and "\ufffd\ufffd fallen off the bus" in text
    long = digest.raw_excerpt("gpu001", "nvidia-smi-q-x", limit=100)
    assert long is not None and long.endswith("[... truncated]") and len(long) < 130
    assert digest.raw_excerpt("gpu001", "../../results") is None
    assert digest.raw_excerpt("gpu001", "missing") is None
    job = digest.raw_excerpt("gpu002", IMB_JOB_ID)  # a benchmark job's output lives in raw/_jobs/
    assert job is not None and "Benchmarking PingPong" in job


def test_tally_of_a_passing_host_counts_each_check_as_the_general_pass_does() -> None:
    """The all-PASS shortcut (most hosts of a big run) gives what the finding-by-finding pass gives."""
    from healthcheck.reports.findings_index import tally

    def finding(check: str, status: Status, component: str = "node") -> Finding:
        return Finding(host="gpu001", check=check, status=status, message="m", component=component)

    passing = [finding("gpu.temp", Status.PASS, f"gpu{i}") for i in range(8)] + [finding("ib.port.state", Status.PASS)]
    fast = tally(passing)
    assert fast.counts == {"PASS": 9, "SKIP": 0, "WARN": 0, "ERROR": 0, "FAIL": 0}
    assert fast.worst == {"gpu.temp": (Status.PASS, 8), "ib.port.state": (Status.PASS, 1)}
    assert fast.first_bad is None
    mixed = tally([*passing, finding("gpu.temp", Status.WARN, "gpu3"), finding("gpu.temp", Status.FAIL, "gpu4")])
    assert mixed.counts == {"PASS": 9, "SKIP": 0, "WARN": 1, "ERROR": 0, "FAIL": 1}
    assert mixed.worst == {"gpu.temp": (Status.FAIL, 1), "ib.port.state": (Status.PASS, 1)}
    assert mixed.first_bad is not None and mixed.first_bad.component == "gpu4"


def test_hosts_that_tally_alike_share_one_tally_and_a_bad_host_keeps_its_own() -> None:
    """Most of a fleet passes the same checks the same way: the index holds their counts and worst statuses
    once (a copy per host would be most of the reports' memory on a large run); values are as unshared."""
    from healthcheck.reports.findings_index import index_findings, tally
    from healthcheck.store.results import HostResult

    def host(name: str, *extra: Finding) -> HostResult:
        checks = [Finding(name, "gpu.temp", Status.PASS, f"gpu{i} 35 C", component=f"gpu{i}") for i in range(8)]
        return HostResult(name, [*checks, Finding(name, "ib.port.state", Status.PASS, "ACTIVE"), *extra])

    hosts = [host("n1"), host("n2"), host("n3", Finding("n3", "gpu.ecc", Status.SKIP, "no ECC")),
             host("n4", Finding("n4", "gpu.ecc", Status.FAIL, "2 uncorrectable")), host("n5")]
    index = index_findings(hosts)
    t = index.tallies
    assert t["n1"].worst is t["n2"].worst is t["n5"].worst and t["n1"].counts is t["n5"].counts
    assert t["n3"].worst is not t["n1"].worst and t["n4"].worst is not t["n1"].worst
    assert t["n3"].counts == {"PASS": 9, "SKIP": 1, "WARN": 0, "ERROR": 0, "FAIL": 0}
    assert t["n4"].first_bad is not None and t["n4"].first_bad.host == "n4"
    for h in hosts:
        assert t[h.name] == tally(h.findings)
