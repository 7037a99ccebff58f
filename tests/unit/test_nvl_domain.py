"""probes/nvl_domain.py and probes/nvl_trays.py: the verdict per NVLink domain on simulated GB200 NVL72 fleets.

Each tray's observations come from parsing our GB200 tray fixture (the layout of a real 4x GB200 capture),
edited for its rack, slot, cluster UUID, clique and faults, exactly as the fleet stage receives them."""

from __future__ import annotations

from functools import cache

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.probes.fabric import parse_fabric
from healthcheck.probes.imex import parse_imex
from healthcheck.probes.nvl_domain import NvlDomainCheck
from healthcheck.store.jsoncodec import to_jsonable
from tests.conftest import fixture_text

TRAY = fixture_text("nvidia-smi-xml/gb200-tray-4x-healthy.xml")
UUID = "6f1d2c9e-41b7-4e0a-9c35-8b2a7d5e0c14"
OTHER = "0b7e4a51-93c2-4f6d-8a10-5c3e9d2f7b68"
RACK, RACK2 = "1821025000117", "1821025000342"
PROFILE = "gb200-nvl72-tray"
CHECK = NvlDomainCheck()


@cache
def tray_observations(slot: int, uuid: str = UUID, clique: int = 32766, rack: str = RACK,
                      faults: tuple[tuple[int, str, str], ...] = ()) -> dict:
    """One tray's fabric observations (JSON form), parsed from the fixture with its place and faults."""
    xml = (TRAY.replace(UUID, uuid).replace("<cliqueId>32766</cliqueId>", f"<cliqueId>{clique}</cliqueId>")
           .replace(RACK, rack).replace("<slot_number>7</slot_number>", f"<slot_number>{slot}</slot_number>")
           .replace("<tray_index>3</tray_index>", f"<tray_index>{slot}</tray_index>"))
    head, *gpus = xml.split("<gpu id=")
    for index, old, new in faults:
        assert old in gpus[index]
        gpus[index] = gpus[index].replace(old, new)
    xml = "<gpu id=".join([head, *gpus])
    obs = parse_fabric({"nvidia-smi-q-x": CommandResult(host="t", command_id="nvidia-smi-q-x", stdout=xml.encode())})
    return to_jsonable(obs)


DEGRADED = ((1, "<bandwidth>Full</bandwidth>", "<bandwidth>Degraded</bandwidth>"),)


def fleet(n: int = 18, prefix: str = "r1t", **by_slot) -> dict[str, dict]:
    """``n`` trays named r1t01.., healthy unless ``by_slot`` (``s5={"clique": 7}``) says otherwise."""
    return {f"{prefix}{s:02d}": {"fabric": tray_observations(s, **by_slot.get(f"s{s}", {}))} for s in range(1, n + 1)}


def grade(observations: dict, profile: str = PROFILE):
    hosts = {name: Host(name, profile=profile) for name in observations}
    profiles = {profile: load_profile(profile)}
    return CHECK.evaluate_fleet(observations, hosts, profiles), CHECK.table(observations, hosts, profiles)


def bad(findings):
    return sorted((f.host, f.check, f.status.value) for f in findings if f.status is not Status.PASS)


def test_healthy_72_gpu_domain_passes_every_domain_check():
    findings, table = grade(fleet())
    assert bad(findings) == []
    assert {f.check for f in findings} == {"nvl.domain.trays", "nvl.domain.gpus", "nvl.domain.clique",
                                          "nvl.domain.service"}
    assert len(findings) == 4 * 18
    (row,) = table["domains"]
    assert (row["cluster_uuid"], row["trays"], row["gpus"], row["expected_trays"], row["expected_gpus"],
            row["verdict"], row["bad_trays"], row["racks"]) == (UUID, 18, 72, 18, 72, "PASS", [], [RACK])
    assert [m["slot"] for m in row["members"]] == [str(s) for s in range(1, 19)]


def test_one_tray_in_another_clique():
    findings, table = grade(fleet(s5={"clique": 7}))
    assert bad(findings) == [("r1t05", "nvl.domain.clique", "FAIL")]
    (clique,) = [f for f in findings if f.status is Status.FAIL]
    assert clique.value == 7 and clique.expected == 32766 and "17 of 18 trays are in clique 32766" in clique.message
    assert table["domains"][0]["bad_trays"] == ["r1t05"] and table["domains"][0]["verdict"] == "WARN"


def test_one_tray_with_degraded_bandwidth_is_a_bad_tray_below_the_service_threshold():
    findings, table = grade(fleet(s9={"faults": DEGRADED}))
    assert bad(findings) == []   # the tray's own fabric.health.bandwidth FAIL is its host's finding
    (row,) = table["domains"]
    assert row["bad_trays"] == ["r1t09"] and row["bad_share"] == round(1 / 18, 3)
    (member,) = [m for m in row["members"] if m["host"] == "r1t09"]
    assert member["problems"] == ["gpu1: bandwidth Degraded"]
    assert [g["problem"] for g in member["gpus"]] == [None, "bandwidth Degraded", None, None]


def test_mismatched_cluster_uuid_within_a_rack():
    findings, table = grade(fleet(s12={"uuid": OTHER}))
    got = bad(findings)
    assert ("r1t12", "nvl.domain.cluster_uuid", "FAIL") in got
    assert [h for h, c, s in got if c == "nvl.domain.trays"] == [f"r1t{s:02d}" for s in range(1, 19)]
    (uuid,) = [f for f in findings if f.check == "nvl.domain.cluster_uuid" and f.status is Status.FAIL]
    assert uuid.value == OTHER and uuid.expected == UUID and "17 of 18 trays of the rack" in uuid.message
    main = next(r for r in table["domains"] if r["cluster_uuid"] == UUID)
    assert (main["trays"], main["missing"], main["verdict"]) == (17, 1, "WARN")
    (trays,) = [f for f in findings if f.check == "nvl.domain.trays" and f.host == "r1t01"]
    assert (trays.status, trays.value) == (Status.WARN, 17) and "1 trays missing" in trays.message


def test_five_of_eighteen_bad_trays_rack_needs_service_listing_them():
    broken = {f"s{s}": {"faults": DEGRADED} for s in (2, 3, 8, 13, 17)}
    findings, table = grade(fleet(**broken))
    service = {f.host: f for f in findings if f.check == "nvl.domain.service"}
    names = ["r1t02", "r1t03", "r1t08", "r1t13", "r1t17"]
    assert sorted(h for h, f in service.items() if f.status is Status.FAIL) == names
    assert sum(f.status is Status.WARN for f in service.values()) == 13
    msg = service["r1t01"].message
    assert msg.startswith("rack needs service: NVLink domain 6f1d2c9e: 5 bad trays (" + ", ".join(names))
    assert "share 0.278 over <= 0.25" in msg and "this tray itself is healthy" in msg
    assert service["r1t02"].remedy.startswith("Rack needs service")
    (row,) = table["domains"]
    assert (row["verdict"], row["bad_trays"], row["bad_share"]) == ("FAIL", names, 0.278)


def test_four_bad_trays_stay_within_the_threshold():
    broken = {f"s{s}": {"faults": DEGRADED} for s in (2, 3, 8, 13)}
    findings, table = grade(fleet(**broken))
    assert {f.status for f in findings if f.check == "nvl.domain.service"} == {Status.PASS}
    assert table["domains"][0]["verdict"] == "WARN"


def test_partial_sweep_of_a_rack_is_short_not_broken():
    findings, table = grade(fleet(n=6, s2={"faults": DEGRADED}))
    assert {f.status for f in findings if f.check == "nvl.domain.trays"} == {Status.WARN}
    assert {f.status for f in findings if f.check == "nvl.domain.service"} == {Status.PASS}
    (row,) = table["domains"]
    assert (row["missing"], row["bad_share"], row["verdict"]) == (12, round(1 / 18, 3), "WARN")


def test_two_domains_in_one_run():
    observations = {**fleet(), **fleet(prefix="r2t", **{f"s{s}": {"uuid": OTHER, "rack": RACK2}
                                                         for s in range(1, 19)})}
    findings, table = grade(observations)
    assert bad(findings) == []
    assert [(r["cluster_uuid"], r["trays"], r["racks"]) for r in table["domains"]] == [
        (OTHER, 18, [RACK2]), (UUID, 18, [RACK])]
    assert len(findings) == 2 * 4 * 18


def test_idle_single_node_imex_tray_is_not_bad_and_hgx_hosts_have_no_domain():
    idle = to_jsonable(parse_imex({"imex-service": CommandResult("t", "imex-service", b"inactive\n", rc=3),
                                   "imex-nodes-config": CommandResult("t", "imex-nodes-config", b"", rc=1)}))
    observations = fleet()
    observations["r1t04"] = {**observations["r1t04"], "imex": idle}
    h100 = fixture_text("nvidia-smi-xml/h100-8x-healthy.xml")
    observations["hgx01"] = {"fabric": to_jsonable(parse_fabric({"nvidia-smi-q-x": CommandResult(
        "hgx01", "nvidia-smi-q-x", h100.encode())}))}
    findings, table = grade(observations)
    assert bad(findings) == [] and "hgx01" not in {f.host for f in findings}
    assert table["domains"][0]["bad_trays"] == []


def test_domain_without_expectations_is_skip_never_pass():
    findings, table = grade(fleet(n=4), profile="h100-sxm5-8x")
    assert {f.status for f in findings} == {Status.SKIP}
    assert table["domains"][0]["verdict"] == "SKIP"


def test_results_json_keeps_fabric_whole_only_on_domain_trays():
    from healthcheck.store.observation_store import key_observations

    tray = key_observations(fleet(n=1)["r1t01"])
    assert len(tray["fabric"]["gpus"]) == 4
    h100 = fixture_text("nvidia-smi-xml/h100-8x-healthy.xml")
    hgx = to_jsonable(parse_fabric({"nvidia-smi-q-x": CommandResult("hgx01", "nvidia-smi-q-x", h100.encode())}))
    assert "gpus" not in key_observations({"fabric": hgx}).get("fabric", {})


def test_no_domain_no_table():
    assert grade({})[1] == {}
