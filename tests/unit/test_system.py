"""System and resources probes: identity, mounts (present and responsive), memory, CPUs, /dev/shm, services."""

from __future__ import annotations

import subprocess
from dataclasses import replace

import pytest

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import Expectation, load_profile
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.probes.resources import PROBE as RESOURCES
from healthcheck.probes.resources import evaluate_resources, parse_resources
from healthcheck.probes.system import PROBE, evaluate_system, mount_probe_command, parse_system, render_commands
from healthcheck.probes.system_parse import cpu_list_count, parse_df_posix, parse_proc_mounts, parse_systemctl_units
from healthcheck.run.fanout import plan_commands
from tests.conftest import fixture_text

H100 = load_profile("h100-sxm5-8x")


def own(rel: str) -> str:
    return fixture_text(f"system/{rel}").split("\n", 1)[1]


def results(outputs: dict[str, str | tuple[str, int]]) -> dict[str, CommandResult]:
    out = {}
    for cid, value in outputs.items():
        text, rc = value if isinstance(value, tuple) else (value, 0)
        out[cid] = CommandResult(host="gpu001", command_id=cid, stdout=text.encode(), rc=rc)
    return out


def ctx(profile=H100, name="gpu001"):
    return EvalContext(host=Host(name=name), profile=profile)


def with_expect(profile, **items):
    extra = {k.replace("__", "."): Expectation(key=k.replace("__", "."), source="test", **v) for k, v in items.items()}
    return replace(profile, expectations={**profile.expectations, **extra})


def test_identity_checks_keep_working():
    obs = parse_system(results({"hostname": "gpu001\n", "uname-r": "5.15.0-105-generic\n",
                                "os-release": 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nID=ubuntu\n',
                                "uptime": "350735.47 234388.90\n"}))
    findings = {f.check: f for f in evaluate_system(obs, ctx())}
    assert findings["system.hostname"].status is Status.PASS
    assert findings["system.kernel"].value == "5.15.0-105-generic"
    assert findings["system.os"].value == "Ubuntu 22.04.4 LTS"
    assert findings["system.uptime"].value == 350735


def test_hung_and_missing_mounts():
    profile = with_expect(H100, system__mounts={"op": "eq", "value": ["/home", "/lustre", "/projects"]})
    obs = parse_system(results({"proc-mounts": own("proc-mounts-nfs-lustre.txt"),
                                "mount-probe": own("mount-probe-lustre-hung.txt")}))
    findings = evaluate_system(obs, ctx(profile))
    present = {f.component: f for f in findings if f.check == "system.mount.present"}
    assert present["/home"].status is Status.PASS and "nfs4 from nfs01:/export/home" in present["/home"].message
    assert present["/projects"].status is Status.FAIL and present["/projects"].value == "not mounted"
    hung = [f for f in findings if f.check == "system.mount.responsive"]
    assert [(f.component, f.status, f.value) for f in hung] == [("/lustre", Status.FAIL, 124)]
    assert "lustre" in hung[0].message and "hung" in hung[0].message


def test_all_mounts_answer_is_one_pass():
    obs = parse_system(results({"mount-probe": "0 /\n0 /home\n# mount-probe end\n"}))
    findings = evaluate_system(obs, ctx())
    assert [(f.check, f.status, f.value) for f in findings if f.check.startswith("system.mount")] == [
        ("system.mount.responsive", Status.PASS, 2)]


def test_proc_mounts_decodes_octal_escapes():
    mounts = parse_proc_mounts(own("proc-mounts-nfs-lustre.txt"))
    assert [m.path for m in mounts if m.fstype in ("nfs4", "lustre")] == ["/home", "/lustre", "/data/my data"]


def test_truncated_mount_probe_is_parse_error():
    with pytest.raises(ParseError, match="truncated"):
        parse_system(results({"mount-probe": own("bad/mount-probe-truncated.txt")}))


def test_mount_probe_command_runs_and_bounds_stat(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text('#!/bin/sh\ncase "$*" in *" /") sleep 30;; *) exec /usr/bin/stat "$@";; esac\n')
    stat.chmod(0o755)
    command = mount_probe_command(["/tmp"], timeout_s=1)
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=20,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    probes = dict(reversed(line.split(" ", 1)) for line in proc.stdout.splitlines() if not line.startswith("#"))
    assert probes["/"] == "124" and probes["/tmp"] == "0"
    assert proc.stdout.rstrip().endswith("# mount-probe end")


def test_required_mounts_option_is_quoted_into_the_probe():
    command = render_commands({"required_mounts": ["/scratch dir"]})["mount-probe"]
    assert "'/scratch dir'" in command


def test_profile_mounts_reach_the_planned_command_and_a_missing_one_is_reported_once():
    """The pipeline plans commands per profile (options["profile"]): the profile's system.mounts are
    stat'd on the node even when they are not mounted, so a missing one is seen and a hung one bounded."""
    profile = replace(H100, expectations={**H100.expectations, "system.mounts": Expectation(
        key="system.mounts", op="eq", value=["/lustre", "/home dir"], source="site standard")})
    planned = {c.id: c.line for c in plan_commands([PROBE], {"profile": profile}, 30.0)}
    assert "'/home dir' /lustre; do probe_mount" in planned["mount-probe"]
    assert "/lustre" not in {c.id: c.line for c in plan_commands([PROBE], {"profile": H100}, 30.0)}["mount-probe"]
    obs = parse_system(results({"proc-mounts": "srv:/home /home\\040dir nfs4 rw 0 0\n",
                                "mount-probe": "0 /home dir\n1 /lustre\n# mount-probe end\n"}))
    findings = evaluate_system(obs, ctx(profile))
    assert [(f.check, f.component, f.status) for f in findings if f.check.startswith("system.mount")] == [
        ("system.mount.present", "/lustre", Status.FAIL), ("system.mount.present", "/home dir", Status.PASS),
        ("system.mount.responsive", "node", Status.PASS)]
    assert findings[-1].value == 1


def test_resources_pass_on_a_dgx_class_node():
    obs = parse_resources(results({"meminfo": own("meminfo-2tib-dgx.txt"), "dev-shm": own("df-dev-shm-1tib.txt"),
                                   "cpu-sysfs": "/sys/devices/system/cpu/online:0-223\n"
                                                "/sys/devices/system/cpu/present:0-223\n"}))
    assert (obs.mem_total_kib, obs.cpus_online, obs.cpus_present) == (2113597848, 224, 224)
    findings = {f.check: f for f in evaluate_resources(obs, ctx())}
    assert findings["system.memory"].status is Status.PASS and findings["system.memory"].value == 2015.7
    assert findings["system.cpu.count"].status is Status.PASS
    assert findings["system.cpu.offline"].value == 0 and findings["system.dev_shm"].status is Status.PASS


def test_resources_faults():
    obs = parse_resources(results({"meminfo": own("meminfo-1tib-missing-dimms.txt"),
                                   "dev-shm": own("df-dev-shm-64mib-docker-default.txt"),
                                   "cpu-sysfs": own("cpu-sysfs-224-present-4-offline.txt"),
                                   "systemd-units": own("systemctl-units-persistenced-failed.txt")}))
    findings = {f.check: f for f in evaluate_resources(obs, ctx()) if f.check != "system.service"}
    assert (findings["system.memory"].status, findings["system.memory"].value) == (Status.FAIL, 1007.8)
    assert "1945 GiB" in findings["system.memory"].message
    assert (findings["system.cpu.count"].value, findings["system.cpu.count"].status) == (220, Status.FAIL)
    assert (findings["system.cpu.offline"].value, findings["system.cpu.offline"].status) == (4, Status.FAIL)
    assert (findings["system.dev_shm"].value, findings["system.dev_shm"].status) == (0.06, Status.FAIL)
    service = [f for f in evaluate_resources(obs, ctx()) if f.check == "system.service"]
    assert [(f.component, f.status, f.value) for f in service] == [
        ("nvidia-persistenced", Status.WARN, "failed (failed)")]


def test_services_listed_by_profile_with_and_without_suffix():
    profile = with_expect(H100, system__services={"op": "eq", "value": ["nvidia-dcgm", "slurmd.service", "munge"]})
    obs = parse_resources(results({"systemd-units": own("systemctl-units-persistenced-failed.txt")}))
    found = {f.component: f for f in evaluate_resources(obs, ctx(profile)) if f.check == "system.service"}
    assert found["nvidia-dcgm"].status is Status.PASS
    assert found["slurmd.service"].status is Status.FAIL and found["slurmd.service"].value == "inactive (dead)"
    assert found["munge"].value == "not installed"
    assert "Install the package that provides munge" in found["munge"].remedy


def test_profile_services_are_named_in_the_planned_systemd_query(tmp_path):
    """systemd leaves a stopped, disabled unit out of `list-units --all`; naming the profile's services
    makes it load them, so a stopped fabric manager reads "inactive (dead)", not "not installed"."""
    profile = with_expect(H100, system__services={"op": "eq", "value": ["nvidia-fabricmanager", "slurmd"]})
    line = {c.id: c.line for c in plan_commands([RESOURCES], {"profile": profile}, 30.0)}["systemd-units"]
    assert "--plain nvidia-fabricmanager.service slurmd.service;" in line
    assert "fabricmanager" not in {c.id: c.line for c in plan_commands([RESOURCES], {}, 30.0)}["systemd-units"]
    fake = tmp_path / "systemctl"  # answers like systemd: named units are loaded on request
    fake.write_text('#!/bin/sh\ncase "$*" in *slurmd.service*) '
                    'echo "nvidia-fabricmanager.service loaded inactive dead NVIDIA fabric manager service"; '
                    'echo "slurmd.service not-found inactive dead slurmd.service";; '
                    '*) echo "nvidia-persistenced.service loaded active running NVIDIA Persistence Daemon";; esac\n')
    fake.chmod(0o755)
    proc = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=20,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    obs = parse_resources(results({"systemd-units": proc.stdout}))
    found = {f.component: f for f in evaluate_resources(obs, ctx(profile)) if f.check == "system.service"}
    fm = found["nvidia-fabricmanager"]
    assert (fm.status, fm.value) == (Status.FAIL, "inactive (dead)")
    assert "systemctl enable --now nvidia-fabricmanager" in found["nvidia-fabricmanager"].remedy
    assert found["slurmd"].value == "not installed"


def test_systemd_not_running_is_error_for_expected_services():
    text = ("System has not been booted with systemd as init system (PID 1). Can't operate.\n"
            "Failed to connect to bus: Host is down\n")
    obs = parse_resources({"systemd-units": CommandResult(host="h", command_id="systemd-units", stdout=b"",
                                                          stderr=text.encode(), rc=1)})
    service = [f for f in evaluate_resources(obs, ctx()) if f.check == "system.service"]
    assert [(f.component, f.status) for f in service] == [("nvidia-persistenced", Status.ERROR)]
    assert "System has not been booted with systemd" in service[0].message


def test_parsers_reject_garbage():
    with pytest.raises(ParseError):
        parse_resources(results({"meminfo": own("bad/meminfo-garbage.txt")}))
    with pytest.raises(ParseError):
        parse_df_posix("no header here\n", "/dev/shm")
    with pytest.raises(ParseError):
        cpu_list_count("0-x")
    assert cpu_list_count("0-55,60-223") == 220 and cpu_list_count("") == 0
    assert parse_systemctl_units("garbage\n") == {}
