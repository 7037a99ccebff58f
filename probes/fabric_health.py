"""Per-GPU NVLink fabric identity and health, graded: the R570+ part of ``<fabric>`` (``nvidia-smi -q -x``,
the text ``Fabric`` section, or NVML ``nvmlGpuFabricInfo_v3``).

    evaluate_fabric_health("tray07", gpus, profile)
    # fabric.health.bandwidth gpu2 "Degraded" FAIL, fabric.clique.consistent node PASS, ...

What a GPU reports (NVML fabric definitions, docs.nvidia.com/deploy/nvml-api/group__nvmlFabricDefs.html;
the words as nvidia-smi prints them, e.g. a real 4x GB200 tray's ``<health>`` block):

    <cliqueId>32766</cliqueId>  <clusterUuid>...</clusterUuid>     the NVLink domain and partition it joined
    <health><summary>Healthy</summary><bandwidth>Full</bandwidth>
            <route_recovery_in_progress>False</...><route_unhealthy>False</...>
            <access_timeout_recovery>False</...><incorrect_configuration>None</...></health>

Each health condition is graded per GPU against ``fabric.health.<condition>`` in the profile; without an
expectation a condition the GPU reports as faulty is still a WARN (the GPU says so itself), a healthy one
is not graded. ``summary`` is graded only where no condition explains it. A GPU whose driver prints the
block as N/A (H100/H200, GPUs without a fabric, drivers before R570) has nothing to grade: SKIP saying so
where the profile expects the block, ERROR where it marks it ``required``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from healthcheck.core.grading import Grade, Outcome, ValueGrades, fold, grade_value
from healthcheck.core.model import Finding, Status
from healthcheck.core.profiles import Profile

ZERO_UUID = "00000000-0000-0000-0000-000000000000"
_TRAY = ("The tray's link to the NVLink switch trays is at fault: check `nvidia-smi nvlink -s` for inactive "
         "links, the cable cartridge and switch tray of this slot, and NMX/fabric manager logs on the switch trays")


@dataclass(frozen=True)
class Condition:
    """One health leaf: the words a healthy GPU prints, what a fault means and what to do."""

    leaf: str
    healthy: tuple[str, ...]
    meaning: str
    remedy: str


CONDITIONS = (
    Condition("bandwidth", ("Full",), "NVLink bandwidth to the fabric is degraded",
              "Degraded bandwidth means NVLink links of this GPU are down: " + _TRAY
              + "; then reset the GPU (nvidia-smi -r) or drain the tray until the links are repaired"),
    Condition("route_unhealthy", ("False",), "a route through the NVLink switch fabric is unhealthy",
              "A fabric route from this GPU is unhealthy: " + _TRAY + "; multi-node NVLink jobs will fail "
              "on this GPU until the route is repaired"),
    Condition("route_recovery_in_progress", ("False",), "a fabric route recovery is in progress",
              "The fabric is recovering a route: check again in a few minutes; if it stays, reset the GPU "
              "and read the NVLink switch trays' logs"),
    Condition("access_timeout_recovery", ("False",), "an access-timeout recovery is in progress",
              "The GPU is recovering from a fabric access timeout: check again in a few minutes; if it "
              "stays, reset the GPU and check the kernel log for Xid 144-150 (NVLink) lines"),
    Condition("incorrect_configuration", ("None",), "the fabric reports an incorrect configuration",
              "Incorrect configuration: 'Incorrect SysGUID'/'Incorrect Chassis SN'/'Invalid Location' = the "
              "tray is not where the rack inventory says (re-seat or update the NMX topology); 'Insufficient "
              "NVLinks' = links down (" + _TRAY + "); 'Incompatible GPU Firmware' = flash the rack's firmware "
              "recipe; 'No Partition' = the NMX controller assigned this GPU to no NVLink partition"),
)
SUMMARY = Condition("summary", ("Healthy",), "the fabric health summary is not Healthy",
                    "The GPU's fabric health is not Healthy: " + _TRAY)
NOT_REPORTED = ("N/A", "Not Supported", "")


def health_outcomes(host: str, gpus: Sequence[tuple[str, Mapping[str, str]]], profile: Profile,
                    source: str) -> tuple[list[Outcome], list[Finding]]:
    """Every GPU's health conditions (``(component, health)`` pairs) as outcomes for ``fold``, and the
    node-level findings of GPUs whose driver does not report the block."""
    reported = [(comp, health) for comp, health in gpus if any(v not in NOT_REPORTED for v in health.values())]
    out: list[Outcome] = []
    grades = {c.leaf: ValueGrades(host, f"fabric.health.{c.leaf}", profile.expect(f"fabric.health.{c.leaf}"),
                                  source=source, remedy=c.remedy, profile=profile)
              for c in (*CONDITIONS, SUMMARY)}
    for comp, health in reported:
        faulty = False
        for cond in CONDITIONS:
            outcome = _condition(cond, health.get(cond.leaf), grades[cond.leaf], comp)
            faulty |= outcome is not None and outcome.grade.status not in (Status.PASS, Status.SKIP)
            out.append(outcome)
        if not faulty or health.get("summary") in SUMMARY.healthy:
            out.append(_condition(SUMMARY, health.get("summary"), grades["summary"], comp))
    missing = _not_reported(host, [comp for comp, _ in gpus if all(comp != r for r, _ in reported)],
                            profile, source) if gpus else []
    return [o for o in out if o is not None], missing


def _condition(cond: Condition, value: str | None, grades: ValueGrades, comp: str) -> Outcome | None:
    """One condition of one GPU: graded where the profile expects it, else a WARN when the GPU reports a
    fault itself (None: healthy or not reported, nothing to say without an expectation)."""
    if value is None or value in NOT_REPORTED:
        return None
    if grades.exp is not None:
        return Outcome(comp, grades.grade(value))
    if value in cond.healthy:
        return None
    grade = grade_value(grades.check, None, value, remedy=cond.remedy)._replace(
        status=Status.WARN, expected=" / ".join(cond.healthy), remedy=cond.remedy,
        text=f"fabric health {cond.leaf.replace('_', ' ')} {value!r}: {cond.meaning} (graded without an "
             f"expectation in profile {grades.profile.name if grades.profile else '(none)'}: the GPU reports "
             f"it itself)", named=True)
    return Outcome(comp, grade)


def _not_reported(host: str, comps: Sequence[str], profile: Profile, source: str) -> list[Finding]:
    """GPUs whose driver prints the health block as N/A, where the profile expects the block."""
    wanted = [f"fabric.health.{c.leaf}" for c in (*CONDITIONS, SUMMARY) if profile.expect(f"fabric.health.{c.leaf}")]
    if not comps or not wanted:
        return []
    required = any(profile.expect(k).required for k in wanted)  # type: ignore[union-attr]
    return [Finding(host=host, check="fabric.health", status=Status.ERROR if required else Status.SKIP,
                    component="node", source=source, expected="a fabric health block per GPU",
                    message=f"{', '.join(comps)}: the driver reports no fabric health block (N/A; nvidia-smi "
                            "prints it from R570 on, on GPUs in an NVLink multi-node domain)",
                    remedy="Update the driver to the rack's recipe (R570 or newer) to see degraded bandwidth "
                           "and route faults" if required else None)]


def _uuid_grade(grades: ValueGrades, uuid: str | None) -> Grade:
    """A GPU's cluster UUID graded; one it does not report (N/A beside a clique id) is graded as joined to no
    domain, never as a UUID that differs from all zeros."""
    if uuid is not None:
        return grades.grade(uuid)
    return grades.grade(ZERO_UUID)._replace(value="N/A", text="cluster UUID N/A: the GPU reports no NVLink domain")


@dataclass(frozen=True)
class Identity:
    """One GPU's place in the NVLink fabric: the domain (cluster UUID) and partition (clique) it joined."""

    component: str
    cluster_uuid: str | None
    clique_id: int | None


def identity_findings(host: str, gpus: Iterable[Identity], profile: Profile, source: str) -> list[Finding]:
    """``fabric.cluster_uuid`` per GPU (where the profile expects one: on a multi-node NVLink profile an
    all-zero UUID means the GPU joined no domain) and ``fabric.clique.consistent``: every GPU of this node
    in one domain and partition (a tray whose GPUs sit in different cliques cannot run one NVLink job)."""
    known = [g for g in gpus if g.cluster_uuid is not None or g.clique_id is not None]
    if not known:
        return []
    exp = profile.expect("fabric.cluster_uuid")
    out: list[Finding] = []
    if exp is not None:
        grades = ValueGrades(host, "fabric.cluster_uuid", exp, source=source, profile=profile,
                             remedy="The GPU joined no NVLink domain (cluster UUID all zeros, clique 0): check its "
                                    "fabric state and status, the tray's NVLink cables and the NMX controller's "
                                    "partition; reset the GPU or reboot the tray to register again")
        out += fold(host, source, [Outcome(g.component, _uuid_grade(grades, g.cluster_uuid)) for g in known],
                    total=len(known), noun="GPUs", names={"fabric.cluster_uuid": "cluster UUID"})
    places = {(g.cluster_uuid, g.clique_id) for g in known}
    exp = profile.expect("fabric.clique.consistent")
    if len(places) > 1:
        spread = "; ".join(f"{','.join(g.component for g in known if (g.cluster_uuid, g.clique_id) == p)} in "
                           f"clique {p[1]} of {p[0]}" for p in sorted(places, key=str))
        status = Status(exp.severity) if exp is not None else Status.WARN
        out.append(Finding(host=host, check="fabric.clique.consistent", status=status, value=False, expected=True,
                           source=source, message=f"this tray's GPUs sit in {len(places)} NVLink domains/cliques: "
                                                  f"{spread}" + (f" (source: {exp.source})" if exp else ""),
                           remedy="One tray's GPUs must share one clique: re-register the tray (restart the IMEX/"
                                  "fabric services or reboot) and check the NMX partition holding this tray"))
    elif exp is not None:
        (uuid, clique), = places
        out.append(Finding(host=host, check="fabric.clique.consistent", status=Status.PASS, value=True,
                           expected=True, source=source,
                           message=f"all {len(known)} GPUs in clique {clique} of cluster {uuid}"))
    return out
