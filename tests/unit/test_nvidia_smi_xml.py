"""nvidia-smi -q -x parser: real corpus layouts (drivers 418-595, DTD v12/v13, tabs, MIG), our fixtures."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from healthcheck.core.spec import ParseError
from healthcheck.probes import nvidia_smi_xml, parse_memo
from healthcheck.probes.gpu_model import GpuObservation, observations_from_log
from healthcheck.probes.nvidia_smi_log import IndexedTree, SmiLog, find_nvidia_smi_errors
from healthcheck.probes.nvidia_smi_xml import (
    _SKELETON_MAX,
    _START,
    _drop_unread,
    _element_tree,
    _etree_root,
    _plain_skeleton,
    _plain_text,
    _plain_tree,
    parse_nvidia_smi_xml,
)
from tests.conftest import CORPUS, FIXTURES, ROOT, corpus_files, corpus_text, fixture_text

SAMPLES = ROOT / "inventories" / "samples"


def _obs(text: str):
    return observations_from_log(parse_nvidia_smi_xml(text), "nvidia-smi-q-x")


@pytest.mark.parametrize("path", corpus_files("nvidia-smi-xml"), ids=lambda p: p.name)
def test_conformance_every_corpus_xml_parses(path):
    text = path.read_text(errors="replace").split("\n", 1)[1]
    obs = _obs(text)
    assert obs.gpus and all(g.name for g in obs.gpus)
    assert all(g.bus_id and g.bus_id.startswith("0000") for g in obs.gpus)


def test_a100_v12_dtd_mig_enabled():
    obs = _obs(corpus_text("nvidia-smi-xml/a100-sxm4-80gb-mig-enabled-drv535-v12dtd.txt"))
    assert (obs.driver_version, obs.cuda_version, obs.count, len(obs.gpus)) == ("535.54.03", "12.2", 4, 1)
    g = obs.gpus[0]
    assert (g.name, g.bus_id, g.vbios, g.module_id) == ("NVIDIA A100-SXM4-80GB", "00000000:01:00.0",
                                                       "92.00.36.00.02", 4)
    assert (g.mig_current, g.mig_pending, g.mig_devices) == ("Enabled", "Enabled", 4)
    assert g.remap is None  # "N/A" while MIG is enabled
    assert (g.memory_total_mib, g.memory_used_mib) == (81920, 50)
    assert (g.temp_c, g.shutdown_c, g.slowdown_c, g.max_operating_c) == (27, 92, 89, 85)
    assert (g.memory_temp_c, g.memory_max_operating_c, g.tlimit_c) == (44, 95, None)
    assert (g.power_draw_w, g.power_limit_w, g.power_max_limit_w) == (67.03, 500, 500)
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (4, 4, 16, 16)
    assert g.clock_events == () and g.performance_state == "P0"
    assert (g.reset_required, g.drain_and_reset_recommended) == (False, False)
    assert g.ecc_aggregate.dram_uncorrectable == 0 and g.fabric_state is None


def test_quadro_p400_drv418_old_schema_throttle_reasons():
    g = _obs(corpus_text("nvidia-smi-xml/quadro-p400-drv418-old-schema.txt")).gpus[0]
    assert g.clock_events == ("gpu_idle",)  # from <clocks_throttle_reasons>
    assert g.ecc_current is None and g.ecc_volatile.dram_correctable is None
    assert (g.shutdown_c, g.slowdown_c, g.max_operating_c, g.power_draw_w) == (103, 100, None, None)


def test_p100_tabs_pre_ampere_ecc_and_retired_pages():
    g = _obs(corpus_text("nvidia-smi-xml/tesla-p100-pcie-16gb-drv510-tabs.txt")).gpus[0]
    assert g.ecc_aggregate.dram_correctable == 3  # single_bit/device_memory
    assert (g.ecc_aggregate.sram_correctable, g.ecc_aggregate.dram_uncorrectable) == (0, 0)
    assert (g.retired_sbe, g.retired_dbe, g.retired_pending) == (0, 0, False)
    assert g.remap is None and g.power_limit_w == 250


def test_t4_and_a10g_report_x8_links_and_a10g_remapper():
    t4 = _obs(corpus_text("nvidia-smi-xml/tesla-t4-drv515.txt")).gpus[0]
    assert (t4.pcie_width_current, t4.pcie_width_max) == (8, 16)
    a10g = _obs(corpus_text("nvidia-smi-xml/a10g-drv515-aws.txt")).gpus[0]
    assert a10g.remap is not None and a10g.remap.banks_max == 192 and a10g.remap.pending is False


def test_v13_dtd_tlimit_temperatures_and_sram_parity_secded():
    g = _obs(corpus_text("nvidia-smi-xml/rtx4000-sff-ada-drv595-v13dtd-tabs.txt")).gpus[0]
    assert (g.temp_c, g.tlimit_c) == (38, 49)
    assert (g.shutdown_tlimit_c, g.slowdown_tlimit_c, g.max_operating_tlimit_c) == (-7, -2, 0)
    assert g.shutdown_c is None and g.recovery_action == "None"
    assert g.ecc_current == "Disabled" and g.ecc_aggregate.sram_uncorrectable is None
    assert (g.channel_repair_pending, g.unrepairable_memory) == (False, None)
    assert g.power_draw_w == 8.44  # instant_power_draw when there is no power_draw


def test_blackwell_fragment_with_padded_values():
    g = _obs(corpus_text("nvidia-smi-xml/rtx-pro-6000-blackwell-drv580-UPSTREAM-TRIMMED.txt")).gpus[0]
    assert (g.temp_c, g.tlimit_c, g.shutdown_tlimit_c, g.slowdown_tlimit_c) == (37, 56, -5, 0)
    assert (g.fan_speed, g.power_draw_w) == ("40 %", 66.84)


def test_own_fixture_healthy_h100():
    obs = _obs(fixture_text("nvidia-smi-xml/h100-8x-healthy.xml"))
    assert (obs.count, obs.driver_version, obs.errors) == (8, "535.183.01", ())
    assert [g.bus_id[9:11] for g in obs.gpus] == ["19", "3B", "4C", "5D", "9B", "BB", "CB", "DB"]
    assert {g.name for g in obs.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert all(g.remap.banks_max == 2560 and g.fabric_state == "Completed" for g in obs.gpus)
    assert obs.gpus[6].temp_c == 34 and obs.gpus[6].tlimit_c == 51


def test_own_fixture_faulty_h100():
    gpus = _obs(fixture_text("nvidia-smi-xml/h100-8x-faulty.xml")).gpus
    assert (gpus[2].remap.pending, gpus[2].remap.uncorrectable, gpus[2].remap.banks_high) == (True, 1, 1)
    assert gpus[2].ecc_volatile.dram_uncorrectable == 1
    assert (gpus[5].pcie_width_current, gpus[5].pcie_width_max) == (8, 16)
    assert gpus[6].clock_events == ("hw_slowdown", "hw_power_brake_slowdown")
    assert gpus[6].sm_clock_mhz == 345
    assert [g.index for g in gpus if g.remap.pending or g.pcie_width_current != 16 or
            "hw_slowdown" in g.clock_events] == [2, 5, 6]


def test_warning_line_before_the_document_is_an_error_not_a_parse_failure():
    log = parse_nvidia_smi_xml(fixture_text("nvidia-smi-errors/inforom-warning-before-xml.xml"))
    assert [(e.kind, e.bus_id) for e in log.errors] == [("inforom_corrupted", "00000000:00:1E.0")]
    assert log.gpus[0]["product_name"] == "Tesla T4"


@pytest.mark.parametrize("name, reason", [("truncated-mid-gpu.xml", "truncated"),
                                          ("not-xml.txt", "no <nvidia_smi_log>"),
                                          ("unclosed-tag.xml", "not well-formed")])
def test_bad_inputs_raise_parse_error(name, reason):
    with pytest.raises(ParseError, match=reason):
        parse_nvidia_smi_xml(fixture_text(f"nvidia-smi-xml/bad/{name}"))


def test_corpus_folder_is_where_we_think():
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus absent")
    assert len(corpus_files("nvidia-smi-xml")) == 8


# --- the plain-document reader against ElementTree -------------------------------------------------

def _xml_sources() -> list[str]:
    paths = [*corpus_files("nvidia-smi-xml"), *sorted((FIXTURES / "nvidia-smi-xml").glob("*.xml")),
             *sorted(SAMPLES.glob("*/raw/*/nvidia-smi-q-x.out"))]
    texts = [p.read_text(errors="replace") for p in paths]
    return [t.split("\n", 1)[1] if t.startswith("# source:") else t for t in texts]


def _document(text: str) -> str:
    start = _START.search(text).start()
    return _drop_unread(text[start:text.index("</nvidia_smi_log>") + len("</nvidia_smi_log>")])


def test_plain_reader_gives_elementtrees_tree_for_every_real_layout():
    texts = _xml_sources()
    assert len(texts) >= 10
    for text in texts:
        document = _document(text)
        fast = _plain_tree(document)
        assert fast is not None  # every real nvidia-smi report takes the fast path
        reference = _element_tree(_etree_root(document))
        assert repr(fast) == repr(reference)  # same keys, same order, same values


@pytest.mark.parametrize("old, new, serial", [
    ("<serial>1652323004110</serial>", "<serial>A&amp;B&#65;</serial>", "A&BA"),   # entity references
    ("<serial>1652323004110</serial>", "<serial>1<!-- c -->2<![CDATA[3]]></serial>", "123"),  # comment, CDATA
    ("<serial>1652323004110</serial>", "<serial>1\r\n2</serial>", "1\n2"),   # carriage return
    ('<gpu id="00000000:19:00.0">', '<gpu id="00000000:19:00.0" note="a>b">', "1652323004110"),  # '>' in a value
    ("<serial>1652323004110</serial>", "<serial>1<?pi x?>2</serial>", "12"),   # processing instruction
    ("<serial>1652323004110</serial>", "<!-- c --><serial>7</serial>", "7"),   # comment between elements
    ('<gpu id="00000000:19:00.0">', '<gpu id="00000000:19:00.0" xmlns="urn:x">', "1652323004111"),  # {urn:x}gpu
])
def test_documents_outside_the_plain_form_are_read_by_elementtree(old, new, serial):
    text = fixture_text("nvidia-smi-xml/h100-8x-healthy.xml").replace(old, new, 1)
    assert _plain_tree(_document(text)) is None
    assert _obs(text).gpus[0].serial == serial


def test_prolog_comments_and_xmlns_as_text_stay_on_the_plain_path():
    """expat reports comments, PIs, CDATA and namespace declarations by position: the prolog's
    comment is no reason to leave the plain path, nor is the word "xmlns" in a value."""
    text = fixture_text("nvidia-smi-xml/h100-8x-healthy.xml")
    assert "<!--" in _document(text).split("<nvidia_smi_log", 1)[0]
    text = text.replace("<serial>1652323004110</serial>", "<serial>xmlns</serial>", 1)
    document = _document(text)
    fast = _plain_tree(document)
    assert fast is not None and fast["gpu"][0]["serial"] == "xmlns"
    assert repr(fast) == repr(_element_tree(_etree_root(document)))


def test_malformed_plain_document_keeps_elementtrees_error():
    text = fixture_text("nvidia-smi-xml/h100-8x-healthy.xml").replace("</serial>", "</serail>", 1)
    with pytest.raises(ParseError, match=r"not well-formed XML: mismatched tag: line \d+, column \d+"):
        parse_nvidia_smi_xml(text)


# --- the skeleton check: expat once per set of tags, the text between them checked in C -------------

def test_hosts_printing_the_same_tags_share_one_expat_check():
    parse_memo.clear()
    healthy = fixture_text("nvidia-smi-xml/h100-8x-healthy.xml")
    first = parse_nvidia_smi_xml(healthy)
    other = parse_nvidia_smi_xml(healthy.replace("<serial>1652323004110</serial>", "<serial>99</serial>", 1))
    assert _plain_skeleton.cache_info().misses == 1 and _plain_skeleton.cache_info().hits == 1
    assert (first.gpus[0]["serial"], other.gpus[0]["serial"]) == ("1652323004110", "99")
    parse_memo.clear()
    assert _plain_skeleton.cache_info().currsize == 0


def test_a_report_past_the_skeleton_bound_is_checked_whole_and_never_remembered():
    """A report over _SKELETON_MAX (no real one comes near: 8 GPUs are ~90 KB) is not kept by its tags:
    a hostile bundle cannot make the memo hold 32 of its largest files."""
    parse_memo.clear()
    healthy = fixture_text("nvidia-smi-xml/h100-8x-healthy.xml")
    padded = healthy.replace("<serial>1652323004110</serial>", f"<serial>{'7' * _SKELETON_MAX}</serial>", 1)
    assert parse_nvidia_smi_xml(padded).gpus[0]["serial"] == "7" * _SKELETON_MAX
    assert _plain_skeleton.cache_info().currsize == 0


@pytest.mark.parametrize("old, new, error", [
    # the tags are the healthy report's (already checked): what is wrong is in the text between them
    ("<serial>1652323004110</serial>", "<serial>16523\x0123004110</serial>", "not well-formed"),  # a C0 control
    ("<serial>1652323004110</serial>", "<serial>a>b<c</serial>", "not well-formed"),  # '<' '>' out of turn
])
def test_text_xml_rejects_is_rejected_after_its_tags_were_checked(old, new, error):
    healthy = fixture_text("nvidia-smi-xml/h100-8x-healthy.xml")
    parse_nvidia_smi_xml(healthy)  # its tags are now known to be well-formed
    with pytest.raises(ParseError, match=error):
        parse_nvidia_smi_xml(healthy.replace(old, new, 1))


def test_non_ascii_text_is_checked_by_expat_whole_and_read_as_elementtree_reads_it():
    text = fixture_text("nvidia-smi-xml/h100-8x-healthy.xml").replace(
        "<serial>1652323004110</serial>", "<serial>SN–1652 °C</serial>", 1)
    document = _document(text)
    fast = _plain_tree(document)
    assert fast is not None and fast["gpu"][0]["serial"] == "SN–1652 °C"
    assert repr(fast) == repr(_element_tree(_etree_root(document)))


@pytest.mark.parametrize("document", [
    "<a><processes><x></processes><supported_clocks>1</supported_clocks></a>",
    "<a><processes>never closed<supported_clocks>1</supported_clocks><processes>2</processes></a>",
    "<a><processes><supported_clocks></processes></supported_clocks><accounted_processes/></a>",
    "<a><accounted_processes>1</accounted_processes><processes>2</processes></a>",
    "<a><processes>x<supported_clocks>1</supported_clocks><processes>2<accounted_processes>3</a>",
    "<a><supported_clocks>1<processes>2</processes><processes>3</supported_clocks></processes></a>",
    "<a>" + "<processes>never closed" * 50 + "<supported_clocks>1</supported_clocks>" * 3 + "</a>",
])
def test_unread_sections_are_cut_as_the_original_regex_did(document):
    regex = re.compile(r"<(supported_clocks|processes|accounted_processes)>.*?</\1>", re.S)
    assert _drop_unread(document) == regex.sub("", document)


@given(st.lists(st.sampled_from(["<processes>", "</processes>", "<supported_clocks>", "</supported_clocks>",
                                  "<accounted_processes>", "</accounted_processes>", "<a>", "x", "<processes/>"]),
                max_size=14))
def test_unread_sections_are_cut_as_the_regex_would_for_any_order_of_tags(pieces):
    document = "".join(pieces)
    regex = re.compile(r"<(supported_clocks|processes|accounted_processes)>.*?</\1>", re.S)
    assert _drop_unread(document) == regex.sub("", document)


def test_gpu_element_without_fields_is_a_parse_error_not_a_crash() -> None:
    """An empty ``<gpu/>`` (a mangled report) is refused as unparseable, naming the element."""
    with pytest.raises(ParseError, match=r"<gpu> element .* has no fields"):
        parse_nvidia_smi_xml("<nvidia_smi_log><attached_gpus>1</attached_gpus><gpu/></nvidia_smi_log>")


def test_number_too_large_for_a_float_reads_as_no_value() -> None:
    """A 400-digit memory size overflows a float: the field is unread (None), the parse goes on."""
    from healthcheck.probes.gpu import parse_nvidia_smi_output

    doc = ("<nvidia_smi_log><attached_gpus>1</attached_gpus><gpu id=\"00000000:01:00.0\">"
           "<product_name>NVIDIA H100 80GB HBM3</product_name><fb_memory_usage><total>" + "9" * 400
           + " MiB</total><used>0 MiB</used></fb_memory_usage></gpu></nvidia_smi_log>")
    gpu = parse_nvidia_smi_output("nvidia-smi-q-x", doc, 0).gpus[0]
    assert (gpu.name, gpu.memory_total_mib, gpu.memory_used_mib) == ("NVIDIA H100 80GB HBM3", None, 0)


# --- reports filled into the layout of their tags ---------------------------------------------------

def _reference(text: str) -> SmiLog:
    """The report as ElementTree reads it (the parse every other path must equal)."""
    found = nvidia_smi_xml._document(text)
    if isinstance(found, SmiLog):
        return found
    document, outside = found
    return nvidia_smi_xml._log(None, document, find_nvidia_smi_errors(outside))


def _variants(text: str) -> list[str]:
    """A report and the same tags with other texts (unreadable, padded, active reasons), and with
    other tags: attributes, no Ampere ECC counters."""
    return [text, text.replace("<gpu_temp>", "<gpu_temp>Unknown Error<x/>", 1),
            re.sub(r"<(product_name|gpu_temp|serial|img_version)>[^<]*<", r"<\1> [GPU is lost] <", text),
            text.replace(" C</gpu_temp>", " C \t</gpu_temp>").replace("Not Active", "Active"),
            re.sub(r">(\d+)<", lambda m: f">  {int(m.group(1)) + 7} <", text),
            text.replace("<inforom_version>", '<inforom_version note=" Unknown Error " x="7">', 1),  # attributes
            re.sub(r">[^<\n]+</", ">Unknown Error</", text),                     # every leaf unreadable
            re.sub(r"<((sram|dram)_\w*)>[^<]*</\1>", "", text)]                  # the pre-Ampere ECC fallback


def test_reports_filled_into_their_layout_are_elementtrees_for_every_real_layout():
    """Every real report, and each later report with its tags (the layout made once), is the report
    ElementTree reads: same trees (keys in the same order), same versions and errors."""
    parse_memo.clear()
    for text in _xml_sources():
        for variant in _variants(text) * 2:
            assert repr(parse_nvidia_smi_xml(variant)) == repr(_reference(variant))


def test_gpus_read_through_their_layout_are_the_gpus_read_from_elementtrees_tree():
    """The gpu model reads a report's GPUs through the layout (``IndexedTree``: only the texts it reads are
    looked up): every field, every unreadable path and the count equal a read of ElementTree's plain tree."""
    parse_memo.clear()
    for text in _xml_sources():
        for variant in _variants(text):
            log = parse_nvidia_smi_xml(variant)
            assert log.gpus and all(isinstance(gpu, IndexedTree) for gpu in log.gpus)
            assert observations_from_log(log, "x") == observations_from_log(_reference(variant), "x")
    every_leaf_lost = re.sub(r">[^<\n]+</", ">Unknown Error</", _xml_sources()[0])
    lost = observations_from_log(parse_nvidia_smi_xml(every_leaf_lost), "x")
    assert "temperature/gpu_temp" in lost.gpus[0].unreadable


def test_one_layout_serves_every_report_with_its_tags_each_with_its_own_texts():
    parse_memo.clear()
    healthy = fixture_text("nvidia-smi-xml/h100-8x-healthy.xml")
    first, second = (parse_nvidia_smi_xml(healthy.replace("<serial>1652323004110</serial>",
                                                          f"<serial>{n}</serial>", 1)) for n in (5, 6))
    assert [log.gpus[0]["serial"] for log in (first, second)] == ["5", "6"]
    assert first.gpus[0] is not second.gpus[0] and first.gpus[0]["pci"] is not second.gpus[0]["pci"]  # own trees
    assert _plain_skeleton.cache_info().misses == 1


@pytest.mark.parametrize("text", [
    "<nvidia_smi_log><attached_gpus>1</attached_gpus><gpu/></nvidia_smi_log>",   # a <gpu> without fields
    "<nvidia_smi_log><gpu>x</gpu></nvidia_smi_log>",
    "<nvidia_smi_log><gpu><a>1</b></gpu></nvidia_smi_log>",                       # malformed
    "<other><gpu><a>1</a></gpu></other>",                                          # another root
    "<nvidia_smi_log><gpu><a>1",                                                   # truncated
    "Failed to initialize NVML: Driver/library version mismatch",                  # no report
    "<nvidia_smi_log><gpu><a>&amp;</a></gpu></nvidia_smi_log>",                    # not plain: ElementTree
])
def test_reports_without_a_layout_are_parsed_as_elementtree_reads_them(text):
    """Anything without a layout (not plain, malformed, no fields) is ElementTree's result or its error."""
    parse_memo.clear()
    try:
        expected = repr(_reference(text))
    except ParseError as exc:
        expected = repr(exc)
    try:
        got = repr(parse_nvidia_smi_xml(text))
    except ParseError as exc:
        got = repr(exc)
    assert got == expected


def test_observations_are_built_by_their_constructor_with_unreadable_fields_in_reading_order():
    for text in _xml_sources():
        for variant in _variants(text)[:3]:
            for gpu in _obs(variant).gpus:
                built = GpuObservation(**{f.name: getattr(gpu, f.name) for f in dataclasses.fields(gpu)})
                assert gpu == built and list(vars(gpu).items()) == list(vars(built).items())
    lost = _obs(_variants(fixture_text("nvidia-smi-xml/h100-8x-healthy.xml"))[2]).gpus[0]
    assert lost.unreadable == ("product_name", "serial", "inforom_version/img_version", "temperature/gpu_temp")
    assert (lost.name, lost.temp_c, lost.inforom.get("img_version")) == (None, None, None)


def _plain_text_by_definition(body: str) -> bool:
    allowed = set("\t\n") | {chr(c) for c in range(0x20, 0x80)}
    angles = "".join(c for c in body if c in "<>")
    return all(c in allowed for c in body) and angles == "<>" * (len(angles) // 2)


@given(st.text(alphabet=st.sampled_from("<>a \t\n\r\x00\x01\x0b\x1f\x7f&é"), max_size=24))
def test_plain_text_is_ascii_xml_characters_with_alternating_delimiters(body):
    assert _plain_text(body) == _plain_text_by_definition(body)


@pytest.mark.parametrize("old, new", [
    ("<serial>1652323004110</serial>", "<serial>SN\u2013 1652 \u00b0C</serial>"),       # not ASCII: expat whole
    ("<serial>1652323004110</serial>", f"<serial>{'7' * _SKELETON_MAX}</serial>"),   # past the skeleton bound
])
def test_plain_reports_without_a_layout_are_checked_and_split_once(old, new, monkeypatch):
    """A plain report not remembered by its tags has no layout: its tree is built from the one split
    and the one expat check."""
    parse_memo.clear()
    text = fixture_text("nvidia-smi-xml/h100-8x-healthy.xml").replace(old, new, 1)
    checks = []
    check = nvidia_smi_xml._plain_document
    monkeypatch.setattr(nvidia_smi_xml, "_plain_document", lambda *args: checks.append(1) or check(*args))
    report = parse_nvidia_smi_xml(text)
    assert len(checks) == 1
    assert report.gpus[0]["serial"] == new[len("<serial>"):-len("</serial>")]
    assert repr(report) == repr(_reference(text))
