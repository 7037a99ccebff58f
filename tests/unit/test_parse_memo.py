"""probes/parse_memo.py: one parse per command output per host, shared results immutable; and the fast
paths of the parsers it serves read exactly what their regular expressions read."""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from healthcheck.core.model import CommandResult, Host
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.probes import all_probes, ib_parse, nvlink, parse_memo, system
from healthcheck.probes.ras_parse import parse_aer_sysfs
from healthcheck.run.stages import run_probe
from healthcheck.store.bundle import read_host
from tests.conftest import fixture_text

SAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "samples" / "h100-4node" / "raw"


@pytest.fixture(autouse=True)
def _cold_memos():
    parse_memo.clear()
    yield
    parse_memo.clear()


def test_same_text_is_parsed_once_and_a_different_text_again():
    text = (SAMPLE / "h100-node01" / "ib-sysfs.out").read_text()
    first = ib_parse.parse_ib_sysfs(text)
    assert ib_parse.parse_ib_sysfs(text) is first
    other = text.replace("/rate:400 Gb/sec (4X NDR)", "/rate:200 Gb/sec (4X HDR)", 1)
    assert ib_parse.parse_ib_sysfs(other) is not first
    assert ib_parse.parse_ib_sysfs(other)[0].ports[0].rate_gbps == 200.0
    assert parse_memo.hits()["parse_ib_sysfs"] == (2, 2)


def test_a_parse_error_is_raised_to_every_reader_never_cached():
    for _ in range(3):
        with pytest.raises(ParseError, match="truncated"):
            ib_parse.parse_ib_sysfs("/sys/class/infiniband/mlx5_0/fw_ver:28.39.1002\n")
    assert parse_memo.hits()["parse_ib_sysfs"] == (0, 3)


def test_the_memo_is_bounded():
    for i in range(parse_memo.MEMO_SIZE + 5):
        ib_parse.parse_ib_sysfs(f"/sys/class/infiniband/mlx5_{i}/fw_ver:1.{i}\n# ib-sysfs end\n")
    assert ib_parse.parse_ib_sysfs.cache_info().currsize == parse_memo.MEMO_SIZE  # type: ignore[attr-defined]


def test_shared_results_cannot_be_changed_by_a_reader():
    port = ib_parse.parse_ib_sysfs((SAMPLE / "h100-node01" / "ib-sysfs.out").read_text())[0].ports[0]
    assert port.counters["symbol_error"] == 0
    with pytest.raises(TypeError):
        port.counters["symbol_error"] = 5  # type: ignore[index]
    aer = parse_aer_sysfs("/sys/bus/pci/devices/0000:17:00.0/aer_dev_correctable:BadTLP 3\n"
                          "/sys/bus/pci/devices/0000:17:00.0/aer_dev_correctable:TOTAL_ERR_COR 3\n")
    assert aer["0000:17:00.0"].detail == {"BadTLP": 3}
    with pytest.raises(TypeError):
        aer["0000:17:00.0"].detail["BadTLP"] = 0  # type: ignore[index]
    with pytest.raises(TypeError):
        del aer["0000:17:00.0"]  # type: ignore[attr-defined]


def test_every_shared_output_is_parsed_once_per_host():
    """ib-sysfs (infiniband, rates, versions, and assets: the sample has no hca-ids), nvidia-smi nvlink -e
    (nvlink, rates) and pcie-aer (ras, rates): one parse each while every probe grades the host."""
    results = dict(read_host(SAMPLE / "h100-node01").results)
    aer = fixture_text("system/pcie-aer-gpu-fatal-cmplto.txt").split("\n", 1)[1]  # the sample has no pcie-aer
    results["pcie-aer"] = CommandResult(host="h100-node01", command_id="pcie-aer", stdout=aer.encode(), rc=0)
    profile = load_profile("h100-sxm5-8x")
    host = Host(name="h100-node01", profile="h100-sxm5-8x")
    ctx = EvalContext(host=host, profile=profile)
    for probe in all_probes():
        run_probe(probe, host, results, ctx)
    counts = parse_memo.hits()
    assert counts["parse_ib_sysfs"] == (3, 1)
    assert counts["parse_hca_ids"] == (0, 0)  # the assets probe reads the same parse, not the dump again
    assert counts["parse_nvidia_smi_nvlink_e"] == (1, 1)
    assert counts["parse_aer_sysfs"] == (1, 1)
    assert counts["_parse_result"] == (5, 1)  # gpu, then xid, fabric, versions, pci, assets: decoded once
    assert counts["parse_nvidia_smi_output"] == (0, 1)


# --- fast paths against the regular expressions they stand in for ------------------------------------

def _reference_leaf(value: str) -> tuple[str | None, float | None, int | None, bool | None, bool]:
    """The gpu reader's readings of one leaf as they were written before ``gpu_model._leaf``."""
    from healthcheck.probes.nvidia_smi_log import NOT_AVAILABLE, UNREADABLE
    text = value.strip()
    if text.lower() in UNREADABLE:
        return None, None, None, None, True
    if text.lower() in NOT_AVAILABLE:
        return None, None, None, None, False
    match = re.match(r"^[+-]?\d+(?:\.\d+)?", text)
    number = float(match.group()) if match else None
    if number is not None and number.is_integer():
        number = int(number)
    integer = None if number is None or not math.isfinite(number) else int(number)
    word = text.split()[0].lower() if text else ""
    return text, number, integer, {"yes": True, "no": False}.get(word), False


_LEAVES = ["N/A", "[N/A]", "Unknown Error", "GPU is lost", "Not Supported", "Yes", "No", "yes ", "NO", "35",
           " 40 % ", "-8 C", "+3.50 W", "700.00 W", "0x1", "1" * 400, "12.0", "٣", "Enabled", "", " ", "\t", "e", "İ"]


@settings(max_examples=600, deadline=None, derandomize=True, database=None)
@given(st.lists(st.sampled_from(_LEAVES), max_size=4).map(" ".join) | st.text(max_size=12))
def test_gpu_leaf_readings_are_what_the_reader_read_before(value):
    """One memoized reading (text, number, int, yes/no, unreadable) per leaf, typed=False (key = the string)."""
    from healthcheck.probes.gpu_model import _leaf
    parse_memo.clear()
    assert tuple(_leaf(value)) == _reference_leaf(value)
    assert tuple(_leaf(value)) == _reference_leaf(value)  # from the memo

_PIECES = ["/sys/class/infiniband/", "class/infiniband/", "mlx5_0", "/", ":", "ports/", "1", "12", "٣",
           "counters/", "symbol_error", "rate", " ", "x", "", "#", "\t"]


# The pattern ib-sysfs lines were read with before the linear reader (quadratic on long lines): the reference.
_REFERENCE_SYSFS_LINE = re.compile(r"^(?P<path>\S*?class/infiniband/(?P<dev>[^/:]+)/(?:ports/(?P<port>\d+)/)?"
                                   r"(?P<attr>[^:]+)):(?P<value>.*)$")


@settings(max_examples=600, deadline=None, derandomize=True, database=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=10), st.booleans())
def test_sysfs_line_readers_read_what_the_pattern_read(pieces, rooted):
    """The fast path (``_path_fields``, lines under /sys/class/infiniband/) and the linear reader of any
    other line (``_sysfs_line``) read what the reference pattern read, line for line."""
    line = "".join(pieces)
    if rooted and not line.startswith(ib_parse._SYSFS_ROOT):
        line = ib_parse._SYSFS_ROOT + line
    m = _REFERENCE_SYSFS_LINE.match(line)
    expected = None if m is None else ((m["dev"], None if m["port"] is None else int(m["port"]), m["attr"]),
                                       m["value"])
    assert ib_parse._sysfs_line(line) == expected
    path, colon, value = line.partition(":")
    fields = ib_parse._path_fields.__wrapped__(path) if colon and line.startswith(ib_parse._SYSFS_ROOT) else None
    if fields is not None:  # None: the parser asks ``_sysfs_line``
        assert (fields, value) == expected


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(st.text(alphabet=st.sampled_from(list("aZ 9\"'\\\t#=$.-_é")), max_size=12))
def test_os_release_value_reads_what_shlex_reads(value):
    try:
        parts = shlex.split(value)
    except ValueError:
        parts = [value.strip("\"'")]
    assert system._shell_word(value) == (parts[0] if parts else "")


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(st.text(alphabet=st.sampled_from(list("all links are inactive MIG nvlink NVLINK ſıK\n")), max_size=40))
def test_state_message_search_agrees_with_the_patterns(text):
    expected = any(pat.search(text) for pat, _ in nvlink._STATES)
    assert nvlink._mentions_state(text) == expected
    assert nvlink._mentions_state("all links are inactive\n" + text)


def test_nvlink_blocks_of_every_gpu_are_parsed_once_and_named_in_errors():
    text = (SAMPLE / "h100-node01" / "nvidia-smi-nvlink-e.out").read_text()
    counters = nvlink.parse_nvidia_smi_nvlink_e(text)
    assert len(counters) == 8 * 18 and {c.gpu for c in counters} == set(range(8))
    assert nvlink._counter_values.cache_info().misses == 1  # eight identical healthy blocks
    bad = re.sub(r"(GPU 3:.*\n(?:.*\n){4})", r"\1\tLink 1: Replay Errors 0\n", text, count=1)
    with pytest.raises(ParseError, match=r"nvlink -e GPU 3: unexpected line 'Link 1: Replay Errors 0'"):
        nvlink.parse_nvidia_smi_nvlink_e(bad)
