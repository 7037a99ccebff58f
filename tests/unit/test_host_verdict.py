"""``model.host_verdict`` (C-level passes over a host's findings) agrees with the rule written plainly."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from healthcheck.core.model import Finding, Status, host_verdict, is_evidence, worst


def plain_verdict(findings: list[Finding]) -> Status:
    """The rule as docs/verdicts.md states it, one finding at a time (the implementation before it was sped up)."""
    found = [f for f in findings if not f.observe]
    if not found:
        return Status.ERROR
    graded = [f.status for f in found if f.status is not Status.SKIP]
    if not graded:
        return Status.SKIP
    verdict = worst(graded)
    if verdict in (Status.PASS, Status.WARN) and not any(is_evidence(f) for f in found):
        return Status.ERROR
    return verdict


findings = st.lists(st.builds(Finding, host=st.just("gpu001"),
                              check=st.sampled_from(["gpu.count", "host.reachable", "host.checked", "ib.port.rate"]),
                              status=st.sampled_from(list(Status)), message=st.just("m"), observe=st.booleans()),
                    max_size=8)


@settings(max_examples=400, deadline=None)
@given(findings)
def test_host_verdict_is_the_plain_rule(found: list[Finding]) -> None:
    assert host_verdict(found) is plain_verdict(found)
    assert host_verdict(iter(found)) is plain_verdict(found)  # any iterable, consumed once


def test_concrete_verdicts() -> None:
    def f(status: Status, check: str = "gpu.count", observe: bool = False) -> Finding:
        return Finding(host="h", check=check, status=status, message="m", observe=observe)

    assert host_verdict([]) is Status.ERROR
    assert host_verdict([f(Status.FAIL, observe=True)]) is Status.ERROR          # observe-only decides nothing
    assert host_verdict([f(Status.SKIP), f(Status.SKIP)]) is Status.SKIP
    assert host_verdict([f(Status.PASS, "host.reachable")]) is Status.ERROR      # nothing checked is never PASS
    assert host_verdict([f(Status.PASS), f(Status.WARN), f(Status.SKIP)]) is Status.WARN
    assert host_verdict([f(Status.PASS), f(Status.ERROR), f(Status.FAIL)]) is Status.FAIL
    assert host_verdict([f(Status.PASS), f(Status.ERROR)]) is Status.ERROR
