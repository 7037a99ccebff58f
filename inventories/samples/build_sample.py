"""Rebuild the bundled sample capture ``inventories/samples/h100-4node/`` from the project's fixtures.

    python inventories/samples/build_sample.py

Four 8x H100 nodes as a sweep would capture them: h100-node01, 02 and 04 healthy, h100-node03
faulty (row remap pending on gpu2, PCIe x8 on gpu5, HW slowdown on gpu6, NVLink gpu3 link 5
inactive and gpu6 link 2 degraded, InfiniBand ports at 2X/HDR/Down with symbol errors), and
h100-node04 on another kernel than the rest (a fleet-consistency WARN). Every output is one of the
project's own fixtures in tests/fixtures/ (each says on its first line which real layout it
follows); nothing from ../shared/corpus is copied. The README's first command replays this bundle.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
OUT = Path(__file__).resolve().parent / "h100-4node"
COLLECTED_AT = "2026-11-21T04:00:00+00:00"
HOSTS = ("h100-node01", "h100-node02", "h100-node03", "h100-node04")
FAULTY = "h100-node03"

OS_RELEASE = ('PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
              'VERSION="22.04.4 LTS (Jammy Jellyfish)"\nID=ubuntu\nID_LIKE=debian\n')
MOUNTS = ("sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0\nproc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
          "/dev/md0 / ext4 rw,relatime 0 0\ntmpfs /dev/shm tmpfs rw,nosuid,nodev,size=1056798924k 0 0\n"
          "/dev/md1 /raid ext4 rw,relatime 0 0\nnfs01:/export/home /home nfs4 rw,relatime,vers=4.2,hard 0 0\n")
SERVICES = ("  cron.service                  loaded active   running Regular background program processing daemon\n"
            "  nvidia-persistenced.service   loaded active   running NVIDIA Persistence Daemon\n"
            "  nvidia-fabricmanager.service  loaded active   running NVIDIA fabric manager service\n"
            "  nvidia-dcgm.service           loaded active   running NVIDIA DCGM service\n"
            "  slurmd.service                loaded active   running Slurm node daemon\n"
            "  ssh.service                   loaded active   running OpenBSD Secure Shell server\n")
MOUNT_PROBE = "0 /\n0 /raid\n0 /home\n# mount-probe end\n"


def fixture(relpath: str) -> bytes:
    """A fixture's output, without the leading ``# our own fixture`` comment line of text fixtures."""
    data = (FIX / relpath).read_bytes()
    if data.startswith(b"#"):
        data = data.split(b"\n", 1)[1]
    return data


def kernel_log(relpath: str) -> bytes:
    return b"# kernel-log source=journalctl uptime_s=91234.5\n" + fixture(relpath)


def outputs(host: str) -> dict[str, bytes]:
    faulty = host == FAULTY
    kernel = "5.15.0-1053-nvidia" if host != "h100-node04" else "5.15.0-1061-nvidia"
    return {
        "hostname": f"{host}\n".encode(),
        "uname-r": f"{kernel}\n".encode(),
        "os-release": OS_RELEASE.encode(),
        "uptime": b"91234.50 2871234.12\n",
        "proc-mounts": MOUNTS.encode(),
        "mount-probe": MOUNT_PROBE.encode(),
        "nvidia-smi-q-x": (FIX / "nvidia-smi-xml" / ("h100-8x-faulty.xml" if faulty else "h100-8x-healthy.xml"))
        .read_bytes(),
        "nvidia-smi-topo": fixture("topo/h100-8gpu-nv18-8nic-pxb-healthy.txt"),
        "nvidia-smi-nvlink-s": fixture("nvlink/h100-8gpu-status-gpu3-link5-inactive-gpu6-link2-1.562.txt"
                                       if faulty else "nvlink/h100-8gpu-status-18links-healthy.txt"),
        "nvidia-smi-nvlink-e": fixture("nvlink/h100-8gpu-errors-all-zero.txt"),
        "fabricmanager-status": b"active\n",
        "kernel-log": kernel_log("xid/journalctl-k-healthy.txt"),
        "ib-sysfs": fixture("ib/sysfs-h100-degraded-2x-hdr-down-symbol-errors.txt" if faulty
                            else "ib/sysfs-h100-8x-ndr-healthy.txt"),
        "peermem-module": b"nvidia_peermem\n# peermem end\n",
        "dcgmi-discovery": fixture("dcgmi/discovery-l-8x-h100.txt"),
        "dcgmi-diag": fixture("dcgmi/diag-r1-j-dcgm4.2-8x-h100-pass.json"),
        "dcgmi-health": fixture("dcgmi/health-c-j-healthy.json"),
        "meminfo": fixture("system/meminfo-2tib-dgx.txt"),
        "cpu-sysfs": b"/sys/devices/system/cpu/online:0-223\n/sys/devices/system/cpu/present:0-223\n",
        "dev-shm": fixture("system/df-dev-shm-1tib.txt"),
        "edac-sysfs": (b"/sys/devices/system/edac/mc/mc0/ce_count:0\n/sys/devices/system/edac/mc/mc1/ce_count:0\n"
                       b"/sys/devices/system/edac/mc/mc0/ue_count:0\n/sys/devices/system/edac/mc/mc1/ue_count:0\n"
                       b"# edac end\n"),
        "nccl-libs": fixture("system/nccl-libs.txt"),
        "systemd-units": SERVICES.encode(),
        "nvidia-driver-version": b"535.183.01\n",
        "ofed-info": b"MLNX_OFED_LINUX-23.10-1.1.9.0:\n",
    }


def main(out: Path = OUT) -> None:
    if out.exists():
        shutil.rmtree(out)
    for host in HOSTS:
        folder = out / "raw" / host
        folder.mkdir(parents=True)
        for cid, data in outputs(host).items():
            (folder / f"{cid}.out").write_bytes(data)
            (folder / f"{cid}.rc").write_text("0\n")
        meta = {"transport_error": None, "duration_s": 4.2, "collected_at": COLLECTED_AT, "commands": {}}
        (folder / "_host.json").write_text(json.dumps(meta, indent=1) + "\n")
    manifest = {"note": "sample capture built by inventories/samples/build_sample.py from tests/fixtures",
                "hosts": [{"name": h, "profile": "h100-sxm5-8x", "group": "rack-a", "address": None, "user": None,
                           "port": None, "transport": "ssh", "vars": {}} for h in HOSTS]}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
