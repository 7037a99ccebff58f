from __future__ import annotations

from pathlib import Path

import pytest

from healthcheck.core.profiles import ProfileError, available_profiles, load_profile


def _write(folder: Path, name: str, text: str) -> None:
    (folder / f"{name}.yaml").write_text(text)


def test_inheritance_settings_merge_and_known_issues(tmp_path):
    _write(tmp_path, "base", "name: base\nexpect:\n  gpu.count: {op: eq, value: 8, source: spec}\n"
                             "settings: {nccl: {env: {A: '1'}, sizes: [1, 2]}}\n")
    _write(tmp_path, "child", "name: child\ninherits: base\nexpect:\n"
                              "  gpu.memory_total_mib: {op: ge, value: 80000, unit: MiB, source: sheet}\n"
                              "settings: {nccl: {env: {B: '2'}}}\n"
                              "known_issues: [{check: xid.13, reason: tracked, expires: 2027-01-01}]\n")
    p = load_profile("child", [tmp_path])
    assert p.expect("gpu.count").value == 8
    assert p.expect("gpu.memory_total_mib").unit == "MiB"
    assert p.setting("nccl.env") == {"A": "1", "B": "2"}
    assert p.setting("nccl.sizes") == [1, 2]
    assert p.known_issues[0].expires.isoformat() == "2027-01-01"


@pytest.mark.parametrize(("text", "message"), [
    ("expect:\n  gpu.count: {op: eq, value: 8}\n", "has no source"),
    ("expect:\n  gpu.count: {op: about, value: 8, source: s}\n", "unknown op 'about'"),
    ("expect:\n  gpu.count: {op: eq, valu: 8, source: s}\n", "unknown key 'valu' (did you mean 'value'?)"),
    ("expekt: {}\n", "unknown key 'expekt' (did you mean 'expect'?)"),
    ("inherits: bad\n", "inheritance loop"),
])
def test_malformed_profiles_are_rejected_naming_the_file(tmp_path, text, message):
    _write(tmp_path, "bad", text)
    with pytest.raises(ProfileError) as err:
        load_profile("bad", [tmp_path])
    assert message in str(err.value)


def test_every_project_profile_loads_and_cites_sources():
    names = available_profiles()
    assert {"h100-sxm5-8x", "a100-sxm4-80gb-8x", "h200-sxm-8x", "b200-hgx-8x", "l40s-pcie-4x"} <= set(names)
    for name in names:
        profile = load_profile(name)
        assert profile.expect("gpu.count") is not None, name
        assert all(e.source.strip() for e in profile.expectations.values()), name


def test_unknown_profile():
    with pytest.raises(ProfileError, match="unknown profile 'nope'"):
        load_profile("nope")


def test_sources_cite_public_documents_not_our_research_notes():
    """Users do not have ../shared/research: every profile and Xid catalog source names the public document."""
    from healthcheck.probes.xid import load_catalog

    notes = ("hardware-expectations.md", "shared/research", "research/anchors", "research/hardware", "anchors-")
    for name in available_profiles():
        for key, exp in load_profile(name).expectations.items():
            assert not any(n in exp.source for n in notes), (name, key, exp.source)
    catalog = load_catalog()
    texts = [catalog["source"], *(str(e.get("ref", "")) for e in catalog["xids"].values())]
    assert not [t for t in texts if any(n in t for n in notes)]
