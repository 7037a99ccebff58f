"""Rebuild the bundled sample captures ``inventories/samples/h100-4node{,-acceptance}/`` from the project's fixtures.

    python inventories/samples/build_sample.py

``h100-4node`` holds the probe outputs only (the tests' replay bundle); ``h100-4node-acceptance``
(``healthcheck.inventories.SAMPLE_BUNDLE``, replayed by ``healthcheck run --sample``) holds the same
probe outputs plus the benchmark jobs of an acceptance run.

Four 8x H100 nodes as a sweep would capture them: h100-node01, 02 and 04 healthy, h100-node03
faulty (row remap pending on gpu2, PCIe x8 on gpu5, HW slowdown on gpu6, NVLink gpu3 link 5
inactive and gpu6 link 2 degraded, InfiniBand ports at 2X/HDR/Down with symbol errors), and
h100-node04 on another kernel than the rest (a fleet-consistency WARN). Every output is one of the
project's own fixtures in tests/fixtures/ (each says on its first line which real layout it
follows); nothing from ../shared/corpus is copied. The README's first command replays this bundle.

The benchmark part (issue 20) is written by the real code, so its layout cannot drift: the jobs are
planned by ``healthcheck.run.benchmarks.plan_benchmark`` (acceptance plan, profile h100-sxm5-8x),
each output is wrapped in the real ``JobOutcome`` and written by ``run.benchmarks.store_outcome``
(``raw/_jobs/<job_id>.out|.err|.rc`` + ``manifest.json``), and the telemetry of the single-node jobs
by ``run.telemetry.store_series`` (``raw/_telemetry/<job_id>/<host>.*``). As an acceptance
run with ``skip_failed_hosts: false`` would, node03 is benchmarked too, and its story is coherent:
its degraded NVLink gives a low single-node all_reduce busbw, its three pairs are slow (and the
attribution blames node03, not its partners, who pass with each other), the 4-node job falls below
the 4-node expectation, IMB PingPong with node03 is slow, its HPL is lower and its gpu6 throttles
under load (dmon). The retests of node03 against a known-good partner are planned by the real
``run.benchmarks._retest_jobs`` from the real grading of the first pass, and the 4-node job's rerun
without node03 (which grades the three healthy nodes) by the real ``run.benchmarks.cluster_reruns``.
The outputs follow these real layouts (each fixture's first line says more):

- nccl-tests all_reduce_perf: corpus nccl-tests/all_reduce-h100-2node-16gpu-oci-bm-gpu-h100-8-roce-16hca-
  465GBs-1G-16G.txt (node, pair, cluster, the 3-node rerun) and all_reduce-h100-8gpu-single-node-nvls-476GBs-g8.txt
  (node03's values, at the healthy nodes' message sizes);
- HPL-NVIDIA 1.0.0: corpus hpl/hpl-nvidia-1.0.0-1node-2gpu-80gb-pcie4-passed.txt (node and cluster; the
  healthy node fixture's ``INFO: host=`` lines are renamed to the job's node);
- IMB-MPI1 PingPong, Uniband, Biband (the profile's list): corpus imb/imb-2019u6-pingpong-2proc-ib-openmpi3-
  ucx-1us.txt, imb-2019u5-uniband-2proc-ib-openmpi4-ucx-12GBs.txt, imb-2019u6-biband-ib-openmpi3-ucx-...txt;
- dcgmi dmon (our sampler's output, its ``healthcheck-sampler:`` line first): dcgmi/DeviceMonitor.cpp.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from healthcheck import benchmarks
from healthcheck.benchmarks import BenchContext
from healthcheck.benchmarks.grade import JobOutcome, grade_job
from healthcheck.benchmarks.launch import (
    LauncherSettings,
    hostfile_text,
    launch_script,
    launcher_argv,
    merge_launcher_settings,
)
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import CommandResult, Host
from healthcheck.core.profiles import Profile, load_profile
from healthcheck.run.benchmarks import _retest_jobs, cluster_reruns, plan_benchmark, store_outcome
from healthcheck.run.telemetry import sampling_plan, store_series

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
OUT = Path(__file__).resolve().parent / "h100-4node"
OUT_ACCEPTANCE = Path(__file__).resolve().parent / "h100-4node-acceptance"
COLLECTED_AT = "2026-11-21T04:00:00+00:00"
HOSTS = ("h100-node01", "h100-node02", "h100-node03", "h100-node04")
FAULTY = "h100-node03"
PROFILE = "h100-sxm5-8x"
BENCH_OPTIONS = {"plan": "acceptance", "skip_failed_hosts": False}
HEALTHY_HOST_IN_FIXTURE = "h100-node01"  # the healthy single-node HPL fixture names this host; renamed per node

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


def job_output(job: Job) -> str:
    """The raw stdout of one planned job: a fixture chosen by benchmark, shape and whether node03 is in it."""
    bad = FAULTY in job.hosts
    if job.benchmark == "nccl":
        names = {("node", False): "all_reduce-h100-1node-8gpu-healthy-476GBs-8G-16G.txt",
                 ("node", True): "all_reduce-h100-8gpu-degraded-210GBs-8G-16G.txt",
                 ("pair", False): "all_reduce-h100-2node-16gpu-healthy-388GBs-8G-16G.txt",
                 ("pair", True): "all_reduce-h100-2node-16gpu-degraded-141GBs-8G-16G.txt",
                 ("retest", True): "all_reduce-h100-2node-16gpu-degraded-141GBs-8G-16G.txt",
                 ("cluster", True): "all_reduce-h100-4node-32gpu-degraded-139GBs-8G-16G.txt",
                 ("rerun", False): "all_reduce-h100-3node-24gpu-healthy-373GBs-8G-16G.txt"}
        name = names[("rerun" if job.excluded else "retest" if job.retest_of else job.shape, bad)]
        return fixture(f"nccl-tests/{name}").decode()
    if job.benchmark == "hpl":
        if job.shape == "cluster":
            return fixture("hpl/hpl-nvidia-h100-4node-32gpu-1.55PF-passed.txt").decode()
        if bad:
            return fixture("hpl/hpl-nvidia-h100-1node-8gpu-gpu6-slowdown-372TF-passed.txt").decode()
        return fixture("hpl/hpl-nvidia-h100-1node-8gpu-456TF-passed.txt").decode().replace(
            f"host={HEALTHY_HOST_IN_FIXTURE} ", f"host={job.hosts[0]} ")
    if job.benchmark == "imb":
        name = ("imb-pingpong-uniband-biband-degraded-link-4.8us.txt" if bad
                else "imb-pingpong-uniband-biband-ndr-healthy-1.1us-47.6GBs.txt")
        return fixture(f"imb/{name}").decode()
    raise ValueError(f"the sample has no output for {job.benchmark}")


def telemetry_output(host: str, count: int, interval_ms: int) -> bytes:
    """What our sampler prints during an HPL node job: its mark line, then dcgmi dmon (gpu6 throttles on node03)."""
    name = "h100-8gpu-hpl-load-gpu6-hw-slowdown.txt" if host == FAULTY else "h100-8gpu-hpl-load-healthy.txt"
    mark = f"healthcheck-sampler: dcgmi interval_ms={interval_ms} count={count}\n".encode()
    return mark + fixture(f"dcgmi-dmon/{name}") + b"healthcheck-sampler: stopped\n"


def job_script(job: Job, profile: Profile) -> str:
    """The launcher script the real run would have sent for ``job`` (benchmarks.launch, profile settings)."""
    settings = LauncherSettings.from_mapping(merge_launcher_settings(profile.setting("benchmarks.launcher", {}) or {},
                                                                     {}))
    program = benchmarks.get(job.benchmark).program(job, profile, BENCH_OPTIONS)
    argv = launcher_argv(program, nodes=list(job.hosts), ranks_per_host=job.ranks_per_host, timeout_s=job.timeout_s,
                         settings=settings)
    return launch_script(argv, program, hostfile_text(list(job.hosts), job.ranks_per_host), settings)


def write_benchmarks(out: Path) -> None:
    """``raw/_jobs`` and ``raw/_telemetry`` as ``healthcheck bench --plan acceptance`` writes them (real code)."""
    profile = load_profile(PROFILE)
    hosts = [Host(h, profile=PROFILE) for h in HOSTS]
    by_name = {h.name: h for h in hosts}
    manifest: list[dict] = []
    for name in ("nccl", "hpl", "imb"):
        spec = benchmarks.get(name)
        first = [write_job(out, job, profile, manifest) for job in plan_benchmark(spec, hosts, profile, BENCH_OPTIONS)]
        # the retests of the pair suspects against known-good partners, then the cluster jobs without the
        # nodes they prove bad, as run.benchmarks._run_group plans them
        ctx = BenchContext(profile, by_name, BENCH_OPTIONS)
        graded = [(o, grade_job(o, spec, ctx)[0]) for o in first]
        retests = [write_job(out, job, profile, manifest) for job in _retest_jobs(graded, profile, BENCH_OPTIONS)]
        graded += [(o, grade_job(o, spec, ctx)[0]) for o in retests]
        for job in cluster_reruns(graded):
            write_job(out, job, profile, manifest)


def write_job(out: Path, job: Job, profile: Profile, manifest: list[dict]) -> JobOutcome:
    """One job's outcome (and the telemetry of an HPL node job) stored by the real store functions."""
    if job.benchmark == "hpl" and job.shape == "node":
        ids, count, interval = sampling_plan(job, profile, BENCH_OPTIONS)
        for host in job.hosts:
            meta = {"job": job.to_json(), "host": host, "field_ids": list(ids), "count": count,
                    "interval_ms": interval, "job_window_s": [0.41, 40.52]}
            result = CommandResult(host, job.job_id, stdout=telemetry_output(host, count, interval), rc=0,
                                   duration_s=40.9)
            store_series(out, job.job_id, host, result, meta)
    outcome = JobOutcome(job=job, launcher=job.hosts[0], command=job_script(job, profile), rc=0, timed_out=False,
                         transport_error=None, duration_s=42.0, stdout=job_output(job), stderr="")
    store_outcome(out, outcome, manifest)
    return outcome


def main(out: Path = OUT, with_benchmarks: bool = False) -> None:
    """Write one bundle: the probe outputs of the four hosts, and with ``with_benchmarks`` the benchmark jobs."""
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
    if with_benchmarks:
        write_benchmarks(out)
    print(f"wrote {out}")


def build_all(folder: Path | None = None) -> None:
    """Both bundles, into ``folder`` (default: beside this script)."""
    main(folder / OUT.name if folder else OUT)
    main(folder / OUT_ACCEPTANCE.name if folder else OUT_ACCEPTANCE, with_benchmarks=True)


if __name__ == "__main__":
    build_all(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
