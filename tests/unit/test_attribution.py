"""Pair attribution: the node failing with several partners, confirmed by a retest; the link between
two otherwise-good nodes; what cannot be decided stays unconfirmed (never silently PASS)."""

from __future__ import annotations

from healthcheck.benchmarks.attribution import (
    PairResult,
    apply_blame,
    attribute,
    attribution_findings,
    included_blame,
    retest_candidates,
)
from healthcheck.core.model import Finding, Status


def _pairs(spec: str, retest: bool = False) -> list[PairResult]:
    """``"n1-n2:x n1-n3:ok"`` -> pair results (``x`` failed)."""
    out = []
    for item in spec.split():
        pair, verdict = item.split(":")
        a, b = pair.split("-")
        out.append(PairResult(f"j-{a}-{b}{'-r' if retest else ''}", (a, b), verdict == "ok", retest=retest))
    return out


def test_node_failing_with_several_partners_is_confirmed_by_retest() -> None:
    first = _pairs("n1-n2:x n1-n3:x n1-n4:x n2-n3:ok n2-n4:ok n3-n4:ok")
    suspects, good = retest_candidates(first)
    assert (suspects, good) == (["n1"], ["n2", "n3", "n4"])
    nodes, pairs = attribute(first + _pairs("n1-n5:x", retest=True) + _pairs("n5-n2:ok"))
    assert nodes["n1"].verdict == "bad" and nodes["n1"].failed_with == ("n2", "n3", "n4")
    assert "retest with known-good n5 failed" in nodes["n1"].reason
    assert {h: n.verdict for h, n in nodes.items() if h != "n1"} == dict.fromkeys(("n2", "n3", "n4", "n5"), "good")
    assert {p.job_id: (p.blame, p.blamed) for p in pairs if not p.job_id.endswith("-r")} == \
        {"j-n1-n2": ("node", ("n1",)), "j-n1-n3": ("node", ("n1",)), "j-n1-n4": ("node", ("n1",))}


def test_suspect_that_passes_its_retest_is_flaky_not_bad() -> None:
    results = _pairs("n1-n2:x n1-n3:x n2-n3:ok n4-n2:ok") + _pairs("n1-n4:ok", retest=True)
    nodes, pairs = attribute(results)
    assert nodes["n1"].verdict == "flaky" and "passed the retest with known-good n4" in nodes["n1"].reason
    assert {p.blame for p in pairs} == {"unknown"}  # not pinned on n1, not on a link either


def test_single_bad_pair_between_good_nodes_is_the_link() -> None:
    nodes, pairs = attribute(_pairs("n1-n2:x n1-n3:ok n2-n4:ok n3-n4:ok"))
    assert all(n.verdict == "good" for n in nodes.values())
    assert [(p.job_id, p.blame) for p in pairs] == [("j-n1-n2", "link")]
    findings = attribution_findings("nccl.all_reduce.pairs", nodes, pairs)
    link = [f for f in findings if f.check == "nccl.all_reduce.pairs.link"]
    assert [(f.host, f.status, f.component) for f in link] == \
        [("n1", Status.WARN, "link n1-n2"), ("n2", Status.WARN, "link n1-n2")]


def test_unconfirmed_suspect_without_known_good_partner() -> None:
    nodes, pairs = attribute(_pairs("n1-n2:x n1-n3:x n2-n3:x"))  # everything fails: the fabric, not a node
    assert {n.verdict for n in nodes.values()} == {"suspect"}
    assert all("no known-good partner" in n.reason for n in nodes.values())
    findings = attribution_findings("imb.pairs", nodes, pairs)
    assert {f.status for f in findings} == {Status.WARN}
    # an unconfirmed suspect is retested, not drained: its remedy must not ask for a drain
    assert all("drain" not in (f.remedy or "").lower() and "known-good" in f.remedy for f in findings)
    assert all(p.blame == "node" and len(p.blamed) == 2 for p in pairs)


def test_one_round_failure_needs_retests_to_decide() -> None:
    first = _pairs("n1-n2:x n3-n4:ok")
    assert retest_candidates(first) == (["n1", "n2"], ["n3", "n4"])
    nodes, pairs = attribute(first + _pairs("n1-n3:x n2-n4:ok", retest=True))
    assert (nodes["n1"].verdict, nodes["n2"].verdict) == ("bad", "flaky")
    assert pairs[0].blame == "node" and pairs[0].blamed == ("n1",)


def test_apply_blame_clears_the_partner_and_softens_links() -> None:
    nodes, pairs = attribute(_pairs("n1-n2:x n1-n3:x n2-n3:ok n3-n4:ok n2-n4:x n4-n5:ok n2-n5:ok")
                             + _pairs("n1-n5:x", retest=True))
    failed = [Finding(host=h, check="nccl.all_reduce.pair.busbw", status=Status.FAIL, message="busbw 150 GB/s",
                      source=job) for job, hosts in (("j-n1-n2", ("n1", "n2")), ("j-n2-n4", ("n2", "n4")))
              for h in hosts]
    out = {(f.source, f.host): f for f in apply_blame(failed, pairs)}
    assert out[("j-n1-n2", "n1")].status is Status.FAIL
    assert out[("j-n1-n2", "n2")].status is Status.PASS and "[attributed to n1:" in out[("j-n1-n2", "n2")].message
    assert out[("j-n2-n4", "n2")].status is Status.WARN and "link" in out[("j-n2-n4", "n4")].message
    assert nodes["n1"].verdict == "bad"


def test_link_blame_never_softens_wrong_results_or_hung_jobs() -> None:
    _nodes, pairs = attribute(_pairs("n1-n2:x n1-n3:ok n2-n4:ok n3-n4:ok"))
    assert [(p.job_id, p.blame) for p in pairs] == [("j-n1-n2", "link")]
    found = [Finding(host="n1", check="nccl.all_reduce.data", status=Status.FAIL, message="#wrong 512",
                     source="j-n1-n2"),
             Finding(host="n2", check="nccl.all_reduce.job", status=Status.ERROR, message="job hung",
                     source="j-n1-n2"),
             Finding(host="n2", check="nccl.all_reduce.pair.busbw", status=Status.FAIL, message="busbw 150 GB/s",
                     source="j-n1-n2")]
    out = apply_blame(found, pairs)
    assert [f.status for f in out] == [Status.FAIL, Status.ERROR, Status.WARN]
    assert all("[attributed to the link: n1 and n2 both passed with other partners" in f.message for f in out)


def test_cluster_job_with_a_bad_node_is_inconclusive_for_the_others() -> None:
    nodes, _pairs_blame = attribute(_pairs("n1-n2:x n1-n3:x n2-n3:ok") + _pairs("n1-n3:x", retest=True))
    assert included_blame("j-cluster", ("n2", "n3"), nodes) is None  # no bad node in the job: stays as graded
    blame = included_blame("j-cluster", ("n1", "n2", "n3"), nodes)
    assert blame is not None and (blame.blame, blame.blamed) == ("included", ("n1",))
    found = [Finding(host=h, check=check, status=Status.FAIL, message="m", source="j-cluster")
             for h in ("n1", "n2") for check in ("nccl.all_reduce.cluster.busbw", "nccl.all_reduce.data")]
    out = {(f.host, f.check): f for f in apply_blame(found, [blame])}
    assert out[("n1", "nccl.all_reduce.cluster.busbw")].status is Status.FAIL
    assert out[("n2", "nccl.all_reduce.cluster.busbw")].status is Status.WARN
    assert "the job included n1, bad in the pair tests" in out[("n2", "nccl.all_reduce.cluster.busbw")].message
    assert out[("n2", "nccl.all_reduce.data")].status is Status.FAIL
