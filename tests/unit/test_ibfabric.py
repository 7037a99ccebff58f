"""ibnetdiscover / iblinkinfo parsing (benchmarks/ibfabric.py) on the real outputs of ../shared/corpus/ib and on
our own topology-file fixture, and the leaves it gives the isolation's layout (benchmarks/topology.py)."""

from __future__ import annotations

from healthcheck.benchmarks.ibfabric import FabricLink, host_leaves, parse_fabric, parse_iblinkinfo, switch_name
from healthcheck.benchmarks.topology import build_layout
from tests.conftest import corpus_text, fixture_text


def test_ibnetdiscover_ports_report_from_corpus() -> None:
    links = parse_fabric(corpus_text("ib/ibnetdiscover-p-edr-fixture.txt"))
    # each cable once (the report lists it from both ends); the '4x ???' and '4x SDR' switch-only lines name no HCA
    assert links == (FabricLink("o0001 HCA-1", "ib-i1l1s01", 1, 10), FabricLink("o0002 HCA-1", "ib-i1l1s01", 1, 11),
                     FabricLink("p0001 HCA-1", "ib-i4l1s01", 1, 35))
    assert host_leaves(links, ["o0001", "o0002", "p0001", "q0001"]) == \
        {"o0001": "ib-i1l1s01", "o0002": "ib-i1l1s01", "p0001": "ib-i4l1s01"}


def test_iblinkinfo_from_corpus_skips_ports_that_are_down() -> None:
    text = corpus_text("ib/iblinkinfo-edr-sb7700-switch-16-ports-down-polling-2-active.txt")
    links = parse_iblinkinfo(text)
    assert parse_fabric(text) == links
    assert [(link.host, link.switch_port) for link in links] == [("n02", 17), ("mgt", 36), ("n01", 18)]
    assert {link.switch for link in links} == {"MF0;SB7700:MSB7700/U1"}
    assert host_leaves(links, ["n01", "n02"]) == {"n01": "SB7700", "n02": "SB7700"}


def test_topology_file_of_a_rail_optimised_fabric() -> None:
    links = parse_fabric(fixture_text("ib/ibnetdiscover-topology-rail-optimised-2su.txt"))
    assert len(links) == 9  # 8 compute HCAs (Switch blocks, the Ca block repeats one) + the login node
    leaves = host_leaves(links, ["gpu001", "gpu002", "gpu003", "gpu004.example", "gpu005"])
    assert leaves == {"gpu001": "leaf-su1-r0+leaf-su1-r1", "gpu002": "leaf-su1-r0+leaf-su1-r1",
                      "gpu003": "leaf-su2-r0+leaf-su2-r1", "gpu004.example": "leaf-su2-r0+leaf-su2-r1"}
    layout = build_layout([("gpu001", {}), ("gpu003", {"leaf": "L7"}), ("gpu005", {"nvlink_domain": "nvl1"})],
                          rails=["mlx5_0:1", "mlx5_1:1", "mlx5_0:1"], fabric=leaves)
    assert layout.cell_of == {"gpu001": "leaf-su1-r0+leaf-su1-r1", "gpu003": "L7", "gpu005": "nvl1"}
    assert layout.rails == ("mlx5_0:1", "mlx5_1:1")  # the inventory var wins over the fabric file


def test_garbage_names_no_link() -> None:
    assert parse_fabric(fixture_text("ib/bad/ibstat-garbage.txt")) == ()
    assert parse_fabric("CA: x:\n   garbage ==( )==> nothing\n") == ()
    assert switch_name("Infiniscale-IV Mellanox Technologies") == "Infiniscale-IV Mellanox Technologies"
