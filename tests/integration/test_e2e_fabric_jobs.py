"""End to end over real sshd test hosts: fabric counters before and after each benchmark job, moved by the job.

Each host's ``HEALTHCHECK_SYSFS`` is its own tree laid out like /sys (our 2-port RoCE sysfs fixture, plus
the ``device/net/<netdev>/type`` and ``dev_port`` files the commands read), and its ``ethtool`` is a shim
printing ``ethtool -S`` of a netdev from a file (our ethtool fixture's bodies). The benchmark is the
mpirun stand-in of ``test_e2e_benchmarks``; while it runs it adds traffic (100 GB) and a few pause frames
and wait ticks to every port of its hosts, and on node07 ``mlx5_1`` a pause storm (41,000 more PFC
frames sent) and 2,000,000 ``port_xmit_wait`` ticks. The real snapshot commands, run over SSH right
before and after each launch, must show it: node07's port named with the job and its per-GB figure.
"""

from __future__ import annotations

import html
import json
import re
import shlex
from pathlib import Path

import pytest

from healthcheck.store.results import expanded_document
from tests.conftest import fixture_text
from tests.integration.test_e2e_benchmarks import CLUSTER_OK_3, NODE_OK, PAIR_OK, healthcheck, install_mpirun

pytestmark = pytest.mark.sshd
NAMES = ["node06", "node07", "node08"]
NETDEVS = {"mlx5_0": "ens1f0np0", "mlx5_1": "ens2f0np0"}
GB = 10**9


def own(rel: str) -> str:
    return fixture_text(rel).split("\n", 1)[1]


def ethtool_bodies() -> dict[str, str]:
    """netdev -> the ``ethtool -S`` body of our fixture (its framing lines are the command's, not ethtool's)."""
    out, current = {}, None
    for line in own("ethtool/ethtool-stats-2port-t0.txt").splitlines():
        if line.startswith("# ethtool-stats "):
            current = line.split()[-1] if line.strip() != "# ethtool-stats end" else None
            out[current] = ""
        elif current:
            out[current] += line + "\n"
    out.pop(None, None)
    return out


def fake_fabric(host) -> None:
    """The host's sysfs tree (our RoCE fixture, each RDMA device's Ethernet netdev) and its ethtool shim."""
    links = "".join(f"/sys/class/infiniband/{dev}/device/net/{net}/type:1\n"
                    f"/sys/class/infiniband/{dev}/device/net/{net}/dev_port:0\n" for dev, net in NETDEVS.items())
    host.write_sysfs(own("ib/sysfs-roce-2port-hw-counters-t0.txt") + links)
    stats = host.root / "ethtool"
    stats.mkdir()
    for net, body in ethtool_bodies().items():
        if host.name == "node07" and net == "ens2f0np0":  # a pause storm since boot (as our t1 storm fixture)
            body = body.replace("     tx_prio3_pause: 1411\n", "     tx_prio3_pause: 41001791\n")
        (stats / net).write_text(body)
    tool = host.bindir / "ethtool"
    tool.write_text(f'#!/bin/sh\n[ "$1" = -S ] && exec cat {shlex.quote(str(stats))}/"$2"\n'
                    'echo "ethtool: unsupported arguments: $*" >&2; exit 2\n')
    tool.chmod(0o755)


# The job's effect on the nodes: shell run by the mpirun shim on the launcher (every test host's files are
# on this machine). add FILE NAME N: a sysfs counter file (NAME empty) or an ethtool body's counter, plus N.
DURING = r"""
add() {
  if [ -z "$2" ]; then echo $(( $(cat "$1") + $3 )) > "$1.new"
  else awk -v k="$2:" -v n="$3" '$1 == k { printf "     %s %.0f\n", k, $2 + n; next } { print }' "$1" > "$1.new"
  fi
  mv "$1.new" "$1"
}
for h in $names; do
  base=@BASE@/$h
  for d in mlx5_0 mlx5_1; do
    c=$base/sys/class/infiniband/$d/ports/1/counters
    add "$c/port_xmit_data" "" 12500000000; add "$c/port_rcv_data" "" 12500000000
    add "$c/port_xmit_wait" "" 500
  done
  for e in ens1f0np0 ens2f0np0; do
    add "$base/ethtool/$e" tx_bytes_phy 50000000000; add "$base/ethtool/$e" rx_bytes_phy 50000000000
    add "$base/ethtool/$e" tx_prio3_pause 20
  done
  if [ "$h" = node07 ]; then
    add "$base/ethtool/ens2f0np0" tx_prio3_pause 41000
    add "$base/sys/class/infiniband/mlx5_1/ports/1/counters/port_xmit_wait" "" 2000000
  fi
done
"""


def test_a_pause_storm_during_the_job_is_named_with_host_port_job_and_per_gb(ssh_cluster_factory, tmp_path: Path):
    cluster = ssh_cluster_factory(3, names=NAMES, sysfs=True)
    for host in cluster.hosts:
        fake_fabric(host)
    install_mpirun(cluster, lambda group: ({1: NODE_OK, 2: PAIR_OK}.get(len(group), CLUSTER_OK_3), 0, 0),
                   during=DURING.replace("@BASE@", shlex.quote(str(cluster.base / "hosts"))))
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile="h100-sxm5-8x")
    run_dir = tmp_path / "run"
    proc = healthcheck("run", "-i", inv, "-F", cluster.ssh_config, "--probes", "rates", "--benchmarks", "nccl",
                       "--plan", "acceptance", "--run-dir", run_dir, timeout=300)
    assert (run_dir / "results.json").is_file(), proc.stdout[-2000:] + proc.stderr[-2000:]
    results = expanded_document(run_dir)
    fabric = [f for h in results["hosts"].values() for f in h["findings"]
              if f["check"].startswith("nccl.all_reduce.fabric")]

    # the snapshots were taken over SSH from each host's tree: every multi-node job has before/after files
    jobs = sorted(p.name for p in (run_dir / "raw" / "_fabric").iterdir())
    pair = "nccl-all_reduce_perf-pair-node06-node07"
    assert jobs == sorted([pair, "nccl-all_reduce_perf-cluster-3nodes-node06",  # single-node jobs take none
                           "nccl-all_reduce_perf-pair-node06-node08", "nccl-all_reduce_perf-pair-node07-node08"])
    before = (run_dir / "raw" / "_fabric" / pair / "node07.before.out").read_text()
    assert f"{cluster.host('node07').sysfs}/class/infiniband/mlx5_1/ports/1/counters/port_xmit_wait:" in before
    assert "# ethtool-stats mlx5_1 ens2f0np0\nNIC statistics:\n" in before and "# ethtool-stats end" in before
    meta = json.loads((run_dir / "raw" / "_fabric" / pair / "node07.json").read_text())
    assert meta["errors"] == {"before": None, "after": None}

    # node07 mlx5_1: its pause storm and its wait ticks, per GB the port moved, against the job's ports
    pause = [f for f in fabric if f["check"] == "nccl.all_reduce.fabric.eth.tx_prio3_pause"
             and f"during job {pair} " in f["message"]]
    assert [(f["host"], f["component"], f["status"], f["value"]) for f in pause] == \
        [("node07", "mlx5_1 ens2f0np0", "WARN", 41020)]
    assert "mlx5_1 ens2f0np0: 41,020 tx_prio3_pause (pause frames) during job " + pair in pause[0]["message"]
    assert "410.2 per GB moved (100.0 GB), 2,051x the job's median 0.20 per GB over 4 ports" in pause[0]["message"]
    wait = [f for f in fabric if f["check"] == "nccl.all_reduce.fabric.ib.port_xmit_wait"
            and f"during job {pair} " in f["message"]]
    assert [(f["host"], f["component"], f["value"]) for f in wait] == [("node07", "mlx5_1/1", 2000500)]
    assert "20,005.0 per GB moved (100.0 GB), 4,001x the job's median 5.00 per GB" in wait[0]["message"]

    # every job with node07 names it (its pairs and the 3-node job), and nothing else is flagged; node06 and
    # node08 get one PASS per job
    flagged = {(f["host"], f["check"], f["component"], f["message"].split("during job ")[1].split(" ")[0])
               for f in fabric if f["status"] != "PASS"}
    assert flagged == {("node07", f"nccl.all_reduce.fabric.{c}", port, job)
                       for c, port in (("eth.tx_prio3_pause", "mlx5_1 ens2f0np0"), ("ib.port_xmit_wait", "mlx5_1/1"))
                       for job in jobs if job != "nccl-all_reduce_perf-pair-node06-node08"}
    passes = sorted((f["host"], f["component"]) for f in fabric if f["status"] == "PASS")
    assert passes == sorted((h, job) for job in jobs for h in ("node06", "node08") if h in job or "cluster" in job)

    # the rates probe read the same trees before the jobs: node07's storm since boot is a fleet outlier (the
    # fleet check reads the rates observations whole, from the observation store)
    fleet = [f for h in results["hosts"].values() for f in h["findings"] if f["check"].startswith("fleet.fabric")]
    assert sorted((f["host"], f["check"], f["component"], f["status"]) for f in fleet) == [
        ("node06", "fleet.fabric_counters", "node", "PASS"),
        ("node07", "fleet.fabric_counter.eth.tx_prio3_pause", "mlx5_1 ens2f0np0", "WARN"),
        ("node08", "fleet.fabric_counters", "node", "PASS")]

    # report.html: the heat list (the rates probe read the same trees before the jobs) puts node07's port
    # first, about 29,297x the fleet median of 6 ports (41,001,791 against 1,399.5 since boot), linked to its
    # section; each job's table lists the counters that moved, node07's worst first
    page = (run_dir / "report.html").read_text()
    heat = table_rows(page, "fabric-heat")
    assert heat[0][:4] == ["node07", "mlx5_1 ens2f0np0", "ethtool", "tx_prio3_pause"] and heat[0][7].endswith("×")
    assert 29290 < int(heat[0][7][:-1].replace(",", "")) < 29305  # the hosts' uptimes differ by a fraction of a s
    assert heat[0][5] == "41,001,791" and '<a href="#h-node07">node07</a>' in page
    job = table_rows(page, "fabric-job", f"Job <code>{pair}</code>")
    assert job[0] == ["node07", "mlx5_1/1", "ib.port_xmit_wait", job[0][3], job[0][4], "2000500", "20,005.00", "WARN"]
    assert int(job[0][4]) - int(job[0][3]) == 2000500
    storm = next(r for r in job if r[:3] == ["node07", "mlx5_1 ens2f0np0", "eth.tx_prio3_pause"])
    assert storm[5:] == ["41020", "410.20", "WARN"]
    quiet = sorted((r[1], r[5], r[6]) for r in job if r[0] == "node06" and r[2] == "eth.tx_prio3_pause")
    assert quiet == [("mlx5_0 ens1f0np0", "20", "0.20"), ("mlx5_1 ens2f0np0", "20", "0.20")]
    assert {r[0] for r in job} == {"node06", "node07"}
    assert not [r for r in job if "bytes" in r[2] or "_data" in r[2]]  # traffic volume is not listed
    summary = (run_dir / "summary.md").read_text()
    assert "### Fabric counters: worst ports by rate" in summary and len(job) == 8  # 2 counters x 2 ports x 2 hosts
    assert "| `node07` | mlx5\\_1 ens2f0np0 | `tx_prio3_pause` | " in summary
    assert (f"- `{pair}`: 8 counters moved; worst `node07` mlx5\\_1/1 `ib.port_xmit_wait`: 2,000,500 during "
            "the job, 20,005.00 per GB moved (WARN)") in summary

    # replay: the same fabric findings from raw/_fabric, with every sshd stopped
    cluster.stop()
    replay = healthcheck("run", "--replay", run_dir, "--run-dir", tmp_path / "replay")
    assert (tmp_path / "replay" / "results.json").is_file(), replay.stderr[-2000:]
    again = expanded_document(tmp_path / "replay")
    key = sorted((f["host"], f["check"], f["component"], f["status"], f["value"]) for f in fabric)
    assert sorted((f["host"], f["check"], f["component"], f["status"], f["value"]) for h in again["hosts"].values()
                  for f in h["findings"] if f["check"].startswith("nccl.all_reduce.fabric")) == key
    refleet = [f for h in again["hosts"].values() for f in h["findings"] if f["check"].startswith("fleet.fabric")]
    assert sorted((f["host"], f["check"], f["status"]) for f in refleet) == \
        sorted((f["host"], f["check"], f["status"]) for f in fleet)
    replayed = (tmp_path / "replay" / "report.html").read_text()
    assert table_rows(replayed, "fabric-job", f"Job <code>{pair}</code>") == job


def table_rows(page: str, css: str, after: str = "") -> list[list[str]]:
    """The cells (tags stripped, entities decoded) of each body row of the first ``<table class="grid CSS">``
    after ``after``."""
    start = page.index(f'<table class="grid {css}">', page.index(after) if after else 0)
    body = page[page.index("<tbody>", start):page.index("</tbody>", start)]
    return [[html.unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in body.split("</tr>") if "<td" in row]
