"""The observation store: one gzip member per host, one line per probe, read whole or by probe."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from healthcheck.probes.ib_parse import IbObservation
from healthcheck.store.observation_store import (
    ObservationStore,
    encode_observations,
    iter_observations,
    member_observations,
    read_observations,
)

GPU001 = {"system": {"kernel": "5.15.0-1053-nvidia"}, "gpu": {"count": 8, "driver_version": "550.90.07"},
          "infiniband": IbObservation(devices=(), source="ib-sysfs"), "rates": {"uptime_s": 7200.0}}


def test_one_line_per_probe_that_zcat_and_jq_read(tmp_path: Path) -> None:
    member = encode_observations("gpu001", GPU001)
    lines = [json.loads(line) for line in gzip.decompress(member).splitlines()]
    assert [(r["probe"], r["host"]) for r in lines] == [("system", "gpu001"), ("gpu", "gpu001"),
                                                          ("infiniband", "gpu001"), ("rates", "gpu001")]
    assert lines[2]["observations"]["source"] == "ib-sysfs"
    assert gzip.decompress(encode_observations("gpu002", {})) == b""


def test_a_host_is_read_whole_or_by_probe_and_only_the_wanted_lines_are_decoded(tmp_path: Path) -> None:
    store = ObservationStore(tmp_path)
    at1 = store.append(encode_observations("gpu001", GPU001))
    text = gzip.decompress(encode_observations("gpu002", {"gpu": {"count": 7}, "rates": {"uptime_s": 60}}))
    spoiled = text.replace(b'"count":7}', b'"count":7', 1)    # the gpu line is no longer JSON
    at2 = store.append(gzip.compress(spoiled))
    assert read_observations(tmp_path, at1)["gpu"] == {"count": 8, "driver_version": "550.90.07"}
    assert read_observations(tmp_path, at1, ("rates",)) == {"rates": {"uptime_s": 7200.0}}
    assert read_observations(tmp_path, at2) == {"rates": {"uptime_s": 60}}      # the bad line left out
    assert read_observations(tmp_path, at2, ("rates", "infiniband")) == {"rates": {"uptime_s": 60}}
    assert read_observations(tmp_path, [at2[0] + 3, at2[1]]) is None            # not where a member starts
    assert dict(iter_observations(tmp_path, {"gpu002": at2, "gpu001": at1, "gpu003": None}, ("system",))) == {
        "gpu002": {}, "gpu001": {"system": {"kernel": "5.15.0-1053-nvidia"}}}


def test_a_member_is_the_hosts_where_it_is_whatever_its_lines_say(tmp_path: Path) -> None:
    """The reader attributes a member by its offset (results.json), never by the ``host`` its lines name."""
    store = ObservationStore(tmp_path)
    at = store.append(encode_observations("gpu002", {"gpu": {"count": 1}}))   # gpu001's slot, gpu002's name
    assert dict(iter_observations(tmp_path, {"gpu001": at})) == {"gpu001": {"gpu": {"count": 1}}}


def test_the_one_line_form_is_read_too() -> None:
    line = json.dumps({"host": "gpu001", "observations": {"gpu": {"count": 8}, "rates": {}}}).encode()
    assert member_observations(line + b"\n") == {"gpu": {"count": 8}, "rates": {}}
    assert member_observations(line + b"\n", ("rates",)) == {"rates": {}}
