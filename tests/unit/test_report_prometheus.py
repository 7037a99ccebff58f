"""metrics.prom: textfile-collector format, parsed back with prometheus_client's parser."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from healthcheck.reports.digest import load_digest
from healthcheck.reports.prometheus import render_prometheus
from tests.unit.test_report_digest import make_run


def render(run_dir: Path, detail: bool) -> str:
    digest = load_digest(run_dir)
    digest.options = {"metrics_detail": detail}
    return render_prometheus(digest).decode()


@pytest.fixture
def text(tmp_path: Path) -> str:
    """With ``metrics_detail``: every check and the per-GPU/link/port series."""
    return render(make_run(tmp_path), detail=True)


@pytest.fixture
def bounded(tmp_path: Path) -> str:
    """The default: per host the verdict, counts per status, non-PASS checks, key gauges."""
    return render(make_run(tmp_path), detail=False)


def test_default_is_bounded_per_host(bounded: str) -> None:
    assert value(bounded, "healthcheck_host_verdict", host="gpu001", verdict="FAIL") == 1.0
    assert value(bounded, "healthcheck_host_findings", host="gpu002", status="WARN") == 1.0
    assert value(bounded, "healthcheck_host_findings", host="node-a", status="PASS") == 0.0
    assert value(bounded, "healthcheck_check_status", host="gpu002", check="gpu.temperature", status="WARN") == 1.0
    assert value(bounded, "healthcheck_gpus", host="gpu003") == 8
    assert value(bounded, "healthcheck_nccl_busbw_bytes_per_second", host="gpu004", test="all_reduce_perf") == 240e9
    names = {s[0] for s in samples(bounded)}
    assert "healthcheck_gpu_temperature_celsius" not in names and "healthcheck_nvlink_links_active" not in names
    assert not any(labels == frozenset({("host", "gpu001"), ("check", "gpu.count"), ("status", "PASS")})
                   for name, labels in samples(bounded) if name == "healthcheck_check_status")
    per_host = [s for s in samples(bounded) if ("host", "gpu003") in s[1]]
    assert len(per_host) <= 12  # verdict, 5 counts, gpus, benchmarks: not ~180


def test_detail_reads_the_observation_store_of_a_version_2_run(tmp_path: Path) -> None:
    from healthcheck.core.model import Finding, Status
    from healthcheck.store.results import HostResult, RunResults, write_results

    gpus = [{"index": i, "temp_c": 40.0 + i} for i in range(8)]
    host = HostResult("n1", [Finding("n1", "gpu.count", Status.PASS, "ok")],
                      observations={"gpu": {"count": 8, "gpus": gpus}})
    write_results(tmp_path, RunResults({"id": "x"}, {"n1": host}))
    assert "gpus" not in load_digest(tmp_path).results.hosts["n1"].observations["gpu"]  # results.json: key only
    assert value(render(tmp_path, detail=True), "healthcheck_gpu_temperature_celsius", host="n1", gpu="7") == 47.0
    assert value(render(tmp_path, detail=False), "healthcheck_gpus", host="n1") == 8


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, frozenset(labels.items()))]


def test_host_verdicts_and_check_status(text: str) -> None:
    assert value(text, "healthcheck_host_verdict", host="gpu001", verdict="FAIL") == 1.0
    assert ("healthcheck_host_verdict", frozenset({("host", "gpu001"), ("verdict", "PASS")})) not in samples(text)
    assert value(text, "healthcheck_hosts", verdict="FAIL") == 5.0
    assert value(text, "healthcheck_check_status", host="node-a", check="run.transport", status="ERROR") == 1.0
    assert value(text, "healthcheck_check_status", host="gpu002", check="gpu.temperature", status="WARN") == 1.0
    assert value(text, "healthcheck_check_status", host="gpu001", check="gpu.count", status="PASS") == 1.0
    assert value(text, "healthcheck_run_duration_seconds") == 125.0


def test_check_status_counts_components_in_the_worst_status(tmp_path: Path) -> None:
    from healthcheck.core.model import Finding, Status
    from healthcheck.store.results import HostResult, RunResults, write_results

    fs = [Finding("n1", "gpu.row_remap.pending", Status.FAIL if i in (2, 5) else Status.PASS, "m",
                  component=f"gpu{i}") for i in range(8)]
    write_results(tmp_path, RunResults({"id": "x"}, {"n1": HostResult("n1", fs)}))
    text = render(tmp_path, detail=False)
    assert value(text, "healthcheck_check_status", host="n1", check="gpu.row_remap.pending", status="FAIL") == 2
    assert [line for line in text.splitlines() if line.startswith("healthcheck_check_status")] == [
        'healthcheck_check_status{check="gpu.row_remap.pending",host="n1",status="FAIL"} 2.0']


def test_observation_values_in_base_units(text: str) -> None:
    assert value(text, "healthcheck_gpu_temperature_celsius", host="gpu001", gpu="3") == 38.0
    assert value(text, "healthcheck_gpu_ecc_errors_total", host="gpu001", gpu="0", type="correctable") == 4.0
    assert value(text, "healthcheck_gpu_ecc_errors_total", host="gpu001", gpu="3", type="uncorrectable") == 0.0
    assert value(text, "healthcheck_gpu_row_remap_pending", host="gpu017", gpu="3") == 1.0
    assert value(text, "healthcheck_gpu_row_remap_pending", host="gpu017", gpu="2") == 0.0
    assert value(text, "healthcheck_gpus", host="gpu003") == 8
    assert value(text, "healthcheck_nvlink_links_active", host="gpu004", gpu="3") == 1.0  # link 4 of 4,5
    assert value(text, "healthcheck_nvlink_errors_total", host="gpu004", gpu="3", type="recovery") == 2.0
    assert not any(line.startswith("healthcheck_nvlink") and 'link="' in line for line in text.splitlines())
    assert value(text, "healthcheck_ib_port_rate_bytes_per_second", host="gpu001", port="mlx5_0/1") == 50e9  # 400 Gb/s
    assert value(text, "healthcheck_ib_port_errors_total", host="gpu001", port="mlx5_0/1",
                 counter="symbol_error") == 3.0
    ib_errors = [line for line in text.splitlines() if line.startswith("healthcheck_ib_port_errors_total{")]
    assert ib_errors and all(not line.endswith(" 0.0") for line in ib_errors)  # zero counters left out
    assert value(text, "healthcheck_nccl_busbw_bytes_per_second", host="gpu004",
                 test="all_reduce_perf") == 240e9
    assert value(text, "healthcheck_hpl_flops", host="gpu004") == 250000e9
    assert value(text, "healthcheck_pair_latency_seconds", host_a="gpu001", host_b="gpu002",
                 benchmark="imb PingPong") == pytest.approx(4.8e-6)
    assert value(text, "healthcheck_pair_bandwidth_bytes_per_second", host_a="gpu001", host_b="gpu002",
                 benchmark="imb PingPong") == pytest.approx(3.1e9)


def test_types_suffixes_and_sorted_deterministic_output(tmp_path: Path, text: str) -> None:
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert families["healthcheck_gpu_ecc_errors"] == "counter"  # the parser strips _total
    assert families["healthcheck_gpu_temperature_celsius"] == "gauge"
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert names == sorted(names)
    assert render(make_run(tmp_path / "again"), detail=True) == text
    assert "# TYPE healthcheck_check_status gauge" in text


def test_label_values_are_escaped() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from healthcheck.reports.metrics import Sample
    from healthcheck.reports.prometheus import _Collector, families

    odd = 'x"}\nfake_metric 1\\'
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(families([Sample("healthcheck_hosts", {"verdict": odd}, 2.0)])))
    text = generate_latest(registry).decode()
    assert "\nfake_metric" not in text
    assert value(text, "healthcheck_hosts", verdict=odd) == 2.0


def test_direct_writer_matches_prometheus_client_byte_for_byte(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from healthcheck.reports.metrics import Sample
    from healthcheck.reports.prometheus import _Collector, bench_samples, exposition, families, run_samples

    digest = load_digest(make_run(tmp_path))
    digest.options = {"metrics_detail": True}
    samples = [*run_samples(digest, True), *bench_samples(digest),
               Sample("healthcheck_hosts", {"verdict": 'x"}\n\\'}, 2.0),
               Sample("healthcheck_run_duration_seconds", {}, float("inf")),
               # values the writer's number cache must keep apart: 0.0 and -0.0, NaN, 1 and 1.0
               *(Sample("healthcheck_host_findings", {"host": f"n{i}", "status": "PASS"}, v)
                 for i, v in enumerate((0.0, -0.0, float("nan"), float("nan"), 1, 1.0, 1e21))),
               Sample("healthcheck_check_status", {"host": "n1", "check": "x"}, 3.0)]  # a label missing
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(families(samples)))
    assert exposition(samples) == generate_latest(registry)
    assert b'healthcheck_hosts{verdict="x\\"}\\n\\\\"} 2.0' in exposition(samples)
