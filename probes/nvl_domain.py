"""A verdict per NVLink domain (GB200/GB300 NVL72): the trays graded together, grouped by cluster UUID.

    check = NvlDomainCheck()
    check.evaluate_fleet(observations, hosts, profiles)
    # -> Finding(host="tray07", check="nvl.domain.trays", status=WARN, value=17, expected="== 18", ...)
    check.table(observations, hosts, profiles)   # {"domains": [{"cluster_uuid", "trays", "bad_trays", ...}]}

Runs wherever hosts are graded together (run, replay, merge, sweep: the fleet stage). Each host's tray
comes from its own observations (``probes/nvl_trays.py``); the domain's expectations come from the profile
most of its trays use (``domain.trays``, ``domain.gpus``, ``domain.one_clique``, ``domain.bad_tray_share``).
Findings, on the member hosts:

- ``nvl.domain.trays`` / ``nvl.domain.gpus``: missing or extra members;
- ``nvl.domain.cluster_uuid``: a tray whose rack-mates (same chassis serial) report another cluster UUID;
- ``nvl.domain.clique``: a tray in another clique than the rest of its domain (``domain.one_clique``);
- ``nvl.domain.service``: the share of bad trays (of the trays the domain should have) over
  ``domain.bad_tray_share``: the rack needs service, the bad trays listed (FAIL on a bad tray, WARN on a
  healthy one: it stays usable).

A domain without expectations in its profile is SKIP saying so, never PASS.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.core.grading import expected_text, grade_value
from healthcheck.core.model import Finding, Host, Status
from healthcheck.core.profiles import EMPTY_PROFILE, Expectation, Profile
from healthcheck.probes import register_fleet
from healthcheck.probes.nvl_trays import Tray, group_domains, majority, trays_of

SOURCE = "nvidia-smi-q-x"
REMEDY_MEMBERS = ("Compare the domain's trays with the rack's inventory: a missing tray is down, unreachable, "
                  "not in this run, or registered in another NVLink domain (see nvl.domain.cluster_uuid); an "
                  "extra one means two racks report one cluster UUID: check the NMX controller's domain")
REMEDY_UUID = ("This tray registered in another NVLink domain than its rack: check its NVLink cable cartridge "
               "and the NMX controller's topology, then reset its GPUs or reboot the tray to register again")
REMEDY_CLIQUE = ("This tray sits in another NVLink partition (clique) than the rest of its domain: if the rack is "
                 "not partitioned on purpose, move it back to the default partition in the NMX controller, then "
                 "restart IMEX on the rack's trays")
REMEDY_SERVICE = ("Rack needs service: too many of its compute trays are bad for full-rack jobs. Take the rack out "
                  "of scheduling as a whole and repair the listed trays (and the NVLink switch trays if they "
                  "share a cause); tray by tray drains would leave a rack no 72-GPU job can use")


def _short(uuid: str) -> str:
    return uuid.split("-", 1)[0]


@dataclass(frozen=True)
class Domain:
    """One NVLink domain as graded: its trays, profile, and the trays missing from it."""

    uuid: str
    trays: tuple[Tray, ...]
    profile: Profile

    @property
    def label(self) -> str:
        return f"NVLink domain {_short(self.uuid)}"

    @property
    def gpus(self) -> int:
        return sum(len(t.gpus) for t in self.trays)

    @property
    def clique(self) -> int | None:
        return majority([t.clique_id for t in self.trays])

    def expected(self, key: str) -> Expectation | None:
        return self.profile.expect(key)

    @property
    def missing(self) -> int:
        exp = self.expected("domain.trays")
        wanted = exp.value if exp is not None and isinstance(exp.value, int) else len(self.trays)
        return max(0, wanted - len(self.trays))

    def off_clique(self) -> list[Tray]:
        exp = self.expected("domain.one_clique")
        if exp is None or exp.value is not True:
            return []
        return [t for t in self.trays if t.clique_id != self.clique]

    def bad(self) -> list[Tray]:
        odd = {t.host for t in self.off_clique()}
        return [t for t in self.trays if t.bad or t.host in odd]

    def bad_share(self) -> float:
        """Bad trays over the trays the domain should have: a missing tray is not counted bad (it may just be
        out of this run; ``nvl.domain.trays`` reports it), so a partial sweep never reads as a broken rack."""
        wanted = len(self.trays) + self.missing
        return len(self.bad()) / wanted if wanted else 0.0


def domains_of(observations: Mapping[str, Mapping[str, Any]], hosts: Mapping[str, Host],
               profiles: Mapping[str, Profile]) -> list[Domain]:
    """The NVLink domains of the hosts graded together, each with its majority profile."""
    out = []
    for uuid, trays in group_domains(trays_of(observations)).items():
        names = [hosts[t.host].profile for t in trays if t.host in hosts and hosts[t.host].profile]
        profile = profiles.get(majority(names), EMPTY_PROFILE) if names else EMPTY_PROFILE
        out.append(Domain(uuid=uuid, trays=tuple(trays), profile=profile))
    return out


def _count(domain: Domain, key: str, measured: int, unit: str) -> list[Finding]:
    exp = domain.expected(key)
    check = key.replace("domain.", "nvl.domain.")
    grade = grade_value(check, exp, measured, remedy=REMEDY_MEMBERS, profile=domain.profile)
    have = f"{len(domain.trays)} trays ({domain.gpus} GPUs)"
    text = (f"{domain.label}: {have} graded together; expected {expected_text(exp)} {unit} "
            f"(source: {exp.source})" if exp is not None else
            f"{domain.label}: {have}; no expectation for {key} in profile {domain.profile.name}")
    if domain.missing and exp is not None:
        text += f"; {domain.missing} trays missing"
    return [Finding(host=t.host, check=check, status=grade.status, component="domain", value=measured,
                    expected=grade.expected, unit=unit, source=SOURCE, message=text,
                    remedy=grade.remedy if grade.status not in (Status.PASS, Status.SKIP) else None)
            for t in domain.trays]


def _uuid_findings(trays: Mapping[str, Tray]) -> list[Finding]:
    """Trays of one rack (chassis serial) that disagree on the cluster UUID: the minority is FAIL."""
    racks: dict[str, list[Tray]] = {}
    for tray in trays.values():
        if tray.rack:
            racks.setdefault(tray.rack, []).append(tray)
    out = []
    for rack, members in sorted(racks.items()):
        uuids = {t.cluster_uuid for t in members}
        if len(uuids) < 2:
            continue
        top = majority([t.cluster_uuid for t in members])
        agree = sum(t.cluster_uuid == top for t in members)
        for t in members:
            ok = t.cluster_uuid == top
            out.append(Finding(host=t.host, check="nvl.domain.cluster_uuid", status=Status.PASS if ok else Status.FAIL,
                               component="domain", value=t.cluster_uuid, expected=top, source=SOURCE,
                               message=f"rack {rack}: this tray reports cluster UUID {t.cluster_uuid}; {agree} of "
                                       f"{len(members)} trays of the rack report {top}",
                               remedy=None if ok else REMEDY_UUID))
    return out


def _clique_findings(domain: Domain) -> list[Finding]:
    odd = domain.off_clique()
    exp = domain.expected("domain.one_clique")
    if exp is None:
        return []
    return [Finding(host=t.host, check="nvl.domain.clique", status=Status(exp.severity) if t in odd else Status.PASS,
                    component="domain", value=t.clique_id, expected=domain.clique, source=SOURCE,
                    message=f"{domain.label}: this tray is in clique {t.clique_id}; {len(domain.trays) - len(odd)} "
                            f"of {len(domain.trays)} trays are in clique {domain.clique} (source: {exp.source})",
                    remedy=REMEDY_CLIQUE if t in odd else None) for t in domain.trays]


def _service_findings(domain: Domain) -> list[Finding]:
    exp = domain.expected("domain.bad_tray_share")
    bad = domain.bad()
    share = round(domain.bad_share(), 3)
    listed = ", ".join(t.host for t in bad) or "none"
    what = f"{len(bad)} bad trays ({listed})" + (f", {domain.missing} missing" if domain.missing else "")
    if exp is None:
        return [Finding(host=t.host, check="nvl.domain.service", status=Status.SKIP, component="domain",
                        value=share, source=SOURCE, message=f"{domain.label}: {what}; no expectation for "
                        f"domain.bad_tray_share in profile {domain.profile.name}") for t in domain.trays]
    passed = grade_value("nvl.domain.service", exp, share, remedy=REMEDY_SERVICE).status is Status.PASS
    out = []
    for t in domain.trays:
        status = Status.PASS if passed else Status(exp.severity) if t in bad else Status.WARN
        head = f"{domain.label}: {what} of {len(domain.trays) + domain.missing}, share {share:g}"
        out.append(Finding(host=t.host, check="nvl.domain.service", status=status, component="domain", value=share,
                           expected=expected_text(exp), unit="ratio", source=SOURCE,
                           message=(f"{head}, within {expected_text(exp)}" if passed else
                                    f"rack needs service: {head} over {expected_text(exp)} (source: {exp.source})"
                                    + ("" if t in bad else "; this tray itself is healthy")),
                           remedy=None if passed else REMEDY_SERVICE))
    return out


@dataclass(frozen=True)
class NvlDomainCheck:
    name: str = "nvl.domain"

    def evaluate_fleet(self, observations: Mapping[str, Mapping[str, Any]], hosts: Mapping[str, Host],
                       profiles: Mapping[str, Profile]) -> list[Finding]:
        out = _uuid_findings(trays_of(observations))
        for domain in domains_of(observations, hosts, profiles):
            out += _count(domain, "domain.trays", len(domain.trays), "trays")
            out += _count(domain, "domain.gpus", domain.gpus, "GPUs")
            out += _clique_findings(domain) + _service_findings(domain)
        return out

    def table(self, observations: Mapping[str, Mapping[str, Any]], hosts: Mapping[str, Host],
              profiles: Mapping[str, Profile]) -> dict[str, Any]:
        """``{"domains": [...]}`` for results.json and the reports (nothing when no host joined a domain)."""
        rows = [domain_row(d) for d in domains_of(observations, hosts, profiles)]
        return {"domains": rows} if rows else {}


def domain_row(domain: Domain) -> dict[str, Any]:
    """One domain as a plain JSON row: counts, expectations, verdict and every tray (the rack map)."""
    trays, gpus = domain.expected("domain.trays"), domain.expected("domain.gpus")
    share = domain.expected("domain.bad_tray_share")
    bad = {t.host for t in domain.bad()}
    over = share is not None and grade_value("nvl.domain.service", share, domain.bad_share(),
                                             remedy="").status is not Status.PASS
    short = trays is not None and len(domain.trays) != trays.value
    verdict = "FAIL" if over else "WARN" if bad or short else "SKIP" if share is None and trays is None else "PASS"
    return {"cluster_uuid": domain.uuid, "profile": domain.profile.name, "clique": domain.clique,
            "cliques": sorted({str(t.clique_id) for t in domain.trays}),
            "racks": sorted({t.rack for t in domain.trays if t.rack}),
            "trays": len(domain.trays), "expected_trays": trays.value if trays else None,
            "gpus": domain.gpus, "expected_gpus": gpus.value if gpus else None, "missing": domain.missing,
            "bad_trays": sorted(bad), "bad_share": round(domain.bad_share(), 3),
            "bad_share_max": share.value if share else None, "verdict": verdict,
            "members": [{"host": t.host, "rack": t.rack, "slot": t.slot, "tray_index": t.tray_index,
                         "clique": t.clique_id, "bad": t.host in bad, "problems": list(t.problems),
                         "gpus": [{"index": g.index, "problem": g.problem} for g in t.gpus]} for t in domain.trays]}


CHECK = register_fleet(NvlDomainCheck())
