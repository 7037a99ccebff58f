"""A typo gets help wherever a name is looked up: did-you-mean for profiles, probes, benchmarks,
reporters, transports, inventory keys and --limit groups; a run with nothing selected points at
--sample; --transport slurm without a usable Slurm is one line and exit 2; ``profiles validate`` of
an inventory says it is one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from healthcheck import benchmarks, probes, reports
from healthcheck.cli.main import main
from healthcheck.core.suggest import did_you_mean
from healthcheck.inventory.hosts import InventoryError, parse_inventory
from healthcheck.transport import open_transport
from healthcheck.transport.registry import TransportError
from healthcheck.transport.slurm_nodes import slurm_unusable
from tests.conftest import FIXTURES, fixture_text

ROOT = Path(__file__).resolve().parents[2]


def test_did_you_mean_names_the_closest() -> None:
    assert did_you_mean("h100-sxm5-8", ["h100-sxm5-8x", "a100-sxm4-80gb-8x"]) == " (did you mean 'h100-sxm5-8x'?)"
    assert did_you_mean("rack-z", ["rack-a", "rack-b", "gpu001"], n=2) == " (did you mean 'rack-a' or 'rack-b'?)"
    assert did_you_mean("zzzz", ["rack-a"]) == ""


def test_every_registry_suggests() -> None:
    with pytest.raises(probes.RegistryError, match=r"unknown probe 'nvlnk' \(did you mean 'nvlink'\?\)"):
        probes.get("nvlnk")
    with pytest.raises(benchmarks.RegistryError, match=r"unknown benchmark 'ncl' \(did you mean 'nccl'\?\)"):
        benchmarks.get("ncl")
    with pytest.raises(reports.ReporterError, match=r"unknown reporter 'jnuit' \(did you mean 'junit'\?\)"):
        reports.get("jnuit")
    with pytest.raises(TransportError, match=r"unknown transport 'shh' \(did you mean 'ssh'\?\)"):
        open_transport("shh")
    with pytest.raises(InventoryError, match=r"unknown key 'grups' \(did you mean 'groups'\?\)"):
        parse_inventory({"grups": {}}, "inv.yaml")


def test_unknown_profile_suggests_and_points_at_profiles_list(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["run", "--hosts", "n[1-2]", "--profile", "h100-sxm5-8", "--out",
                                       str(tmp_path / "runs")])
    assert result.exit_code == 2
    assert "healthcheck: unknown profile 'h100-sxm5-8' (did you mean 'h100-sxm5-8x'?): `healthcheck profiles " \
           "list` lists them" in result.output
    assert not (tmp_path / "runs").exists()


def test_run_with_nothing_selected_mentions_the_sample() -> None:
    result = CliRunner().invoke(main, ["run"])
    assert result.exit_code == 2
    assert "to try it first: healthcheck run --sample --out runs" in result.output
    assert "--sample" not in CliRunner().invoke(main, ["bench"]).output  # bench has no sample


def test_profiles_validate_of_an_inventory_says_it_is_one() -> None:
    inventory = ROOT / "inventories" / "example.yaml"
    result = CliRunner().invoke(main, ["profiles", "validate", str(inventory)])
    assert result.exit_code == 2
    assert result.output.strip() == (f"{inventory}: this is an inventory (keys controller, defaults, groups, hosts), "
                                     f"not a profile: check it with `healthcheck inventory show -i {inventory}`; "
                                     "profiles are the files `healthcheck profiles list` names")


@pytest.mark.parametrize(("fixture", "said"), [
    ("sinfo-no-configuration-22.05.err", "no Slurm configuration on this machine (sinfo: Could not establish a "
                                         "configuration source); set SLURM_CONF (or install slurm.conf), or run "
                                         "where srun works"),
    ("sinfo-controller-down-22.05.err", "the Slurm controller does not answer (sinfo: Unable to contact slurm "
                                        "controller (connect failure)); check slurmctld (scontrol ping) and the "
                                        "network to it"),
])
def test_slurm_that_cannot_be_used_from_here(fixture: str, said: str) -> None:
    assert slurm_unusable(fixture_text(f"slurm/{fixture}")) == said
    assert slurm_unusable("srun: error: Unable to allocate resources: Invalid node name specified\n") is None


def test_transport_slurm_without_slurm_is_one_line_and_exit_2(tmp_path: Path, monkeypatch) -> None:
    """srun and sinfo shims that print what the real Slurm 22.05 client prints with no configuration."""
    shims = tmp_path / "bin"
    shims.mkdir()
    captured = FIXTURES / "slurm" / "sinfo-no-configuration-22.05.err"
    for tool in ("srun", "sinfo"):
        (shims / tool).write_text(f"#!/bin/sh\ngrep -v '^#' {captured} >&2\nexit 1\n")
        (shims / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": {"gpu001": {}, "gpu002": {}}}))
    result = CliRunner().invoke(main, ["run", "-i", str(inventory), "--transport", "slurm", "--out",
                                       str(tmp_path / "runs")])
    assert result.exit_code == 2
    assert result.output.strip() == ("healthcheck: --transport slurm: no Slurm configuration on this machine (sinfo: "
                                     "Could not establish a configuration source); set SLURM_CONF (or install "
                                     "slurm.conf), or run where srun works")
    assert not (tmp_path / "runs").exists()
