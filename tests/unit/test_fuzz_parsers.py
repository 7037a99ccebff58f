"""Property tests (issue 13.7): every registered parser and evaluator, on mutated real layouts.

Parsers raise nothing but ParseError; evaluators never raise; a nan/inf from a node is never graded
anything but ERROR; nothing serialises to a bare NaN. Bounded for CI (``FUZZ_EXAMPLES`` per target,
default 200); ``bench/fuzz.py`` runs the same checks for as long as you like (counts in docs/testing.md).
"""

from __future__ import annotations

import json
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from healthcheck.benchmarks.grade import JobOutcome, grade_outcomes
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import Finding, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.store.results import HostResult, RunResults, load_results, write_results
from tests.conftest import fixture_text
from tests.fuzzing import check_benchmark, mutate, parsers

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))
PARSERS = parsers()


def test_every_registered_parser_has_seeds():
    from healthcheck import benchmarks, probes

    assert {f"probe:{p.name}" for p in probes.all_probes()} - {"probe:fleet"} <= set(PARSERS)
    assert {f"bench:{b.name}" for b in benchmarks.all_benchmarks()} <= set(PARSERS)


@pytest.mark.parametrize("parser", sorted(PARSERS))
def test_parser_and_evaluator_contract_on_mutated_real_outputs(parser):
    """``EXAMPLES`` mutated real outputs per registered parser, over all its command ids."""
    group = PARSERS[parser]

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.randoms(use_true_random=False), st.integers(0, len(group) - 1))
    def run(rng: random.Random, which: int) -> None:
        _label, check, texts = group[which]
        check(mutate(rng, rng.choice(texts), rng.choice(texts)))

    run()


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=2000))
def test_benchmark_parsers_on_arbitrary_text(text):
    for name in ("nccl", "hpl", "imb", "osu"):
        check_benchmark(name, text)


# --- the regressions the fuzzer found, as plain examples --------------------------------------

IMB = "imb/imb-pingpong-ndr-healthy-1.1us-47.6GBs.txt"


def test_nan_in_one_imb_row_is_an_error_for_that_job_only():
    """Issue 13.8: one IMB row with nan used to turn every benchmark finding of the run into ERROR."""
    lines = fixture_text(IMB).splitlines()
    row = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["0"])
    lines[row] = "            0         1000         nan         0.00"  # derived from the healthy fixture's row
    nccl = fixture_text("nccl-tests/all_reduce-h100-1node-8gpu-healthy-476GBs-8G-16G.txt")
    profile = load_profile("h100-sxm5-8x", [])
    outcomes = [
        JobOutcome(Job("imb-PingPong-pair-a-b", "imb", "PingPong", "pair", ("a", "b"), 1), "a", "", 0, False, None,
                   1.0, "\n".join(lines), ""),
        JobOutcome(Job("nccl-all_reduce_perf-node-a", "nccl", "all_reduce_perf", "node", ("a",), 8), "a", "", 0,
                   False, None, 1.0, nccl, ""),
    ]
    hosts = [Host("a", profile="h100-sxm5-8x"), Host("b", profile="h100-sxm5-8x")]
    findings, _ = grade_outcomes(outcomes, hosts, {"h100-sxm5-8x": profile}, {})
    imb = [f for f in findings if f.source == "imb-PingPong-pair-a-b"]
    assert {(f.host, f.check, f.status) for f in imb} == {("a", "imb.job", Status.ERROR),
                                                          ("b", "imb.job", Status.ERROR)}
    assert "non-finite number 'nan'" in imb[0].message
    busbw = [f for f in findings if f.check == "nccl.all_reduce.node.busbw"]
    assert [(f.host, f.status) for f in busbw] == [("a", Status.PASS)]


def test_results_json_never_holds_bare_nan(tmp_path):
    """JSON has no NaN: a non-finite number is null (as JSON.stringify writes it), in observations and in a
    finding's value alike; the finding's message still says what the node printed."""
    nan_finding = Finding(host="a", check="gpu.temp", status=Status.ERROR, message="temperature is nan",
                          value=float("nan"), expected=float("inf"))
    results = RunResults(run={"id": "x"}, hosts={"a": HostResult(name="a", findings=[nan_finding], observations={
        "gpu": {"temp_c": float("nan"), "peak": [float("inf"), 1.5]}})})
    write_results(tmp_path, results)
    text = (tmp_path / "results.json").read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text
    host = json.loads(text)["hosts"]["a"]
    assert host["observations"]["gpu"] == {"temp_c": None}  # key observations: the scalars
    assert (host["findings"][0]["value"], host["findings"][0]["expected"]) == (None, None)
    assert host["findings"][0]["message"] == "temperature is nan"
    loaded = load_results(tmp_path, observations=True).hosts["a"]
    assert loaded.observations["gpu"] == {"temp_c": None, "peak": [None, 1.5]}  # the store holds them all
