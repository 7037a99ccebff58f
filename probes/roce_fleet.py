"""RoCE configuration consistency across the fleet: MTU, trust, PFC, ECN per priority, NCCL's GID index.

    check = RoceConsistency()
    check.evaluate_fleet({"gpu007": {"infiniband": {"roce": {"mlx5_0 ens1f0np0": {"pfc": "none", ...}}}}}, ...)
    # -> Finding(host="gpu007", check="fleet.roce.pfc", component="mlx5_0 ens1f0np0", status=WARN,
    #            value="none", expected="3", message="PFC priorities none differ from the fleet majority 3 ...")

Every RoCE port of every host of one profile is compared field by field (``roce_config.FIELDS``). The
expectation is the profile's pin (``roce.<field>``, e.g. ``roce.trust: {op: eq, value: dscp}``) where
the profile sets one, else the majority of the ports: a port that differs is WARN naming the field (FAIL
when off a pin, with the pin's source). One ``fleet.roce`` PASS per host whose ports all agree. A field a
node does not report (no mlnx_qos: no trust or PFC) is left out for it, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.core.grading import expected_text, majority, passes
from healthcheck.core.model import Finding, Host, Status
from healthcheck.core.profiles import EMPTY_PROFILE, Profile
from healthcheck.probes import register_fleet
from healthcheck.probes.roce_config import FIELDS

LABEL = {"mtu": "MTU", "trust": "trust mode", "pfc": "PFC priorities", "ecn_np": "ECN (notification point) "
         "priorities", "ecn_rp": "ECN (reaction point) priorities", "gid_index": "RoCE v2 IPv4 GID index"}
REMEDY = {"mtu": "Set the netdev's MTU like the rest of the fleet (ip link set NETDEV mtu N, and in the network "
                 "configuration); the RDMA path MTU follows it",
          "trust": "Set the trust mode like the rest of the fleet: mlnx_qos -i NETDEV --trust dscp (or pcp)",
          "pfc": "Enable PFC on the same priority as the fleet and the switches: mlnx_qos -i NETDEV --pfc "
                 "0,0,0,1,0,0,0,0 (priority 3 here)",
          "ecn_np": "Enable ECN like the fleet: echo 1 > /sys/class/net/NETDEV/ecn/roce_np/enable/PRIO",
          "ecn_rp": "Enable ECN like the fleet: echo 1 > /sys/class/net/NETDEV/ecn/roce_rp/enable/PRIO",
          "gid_index": "The RoCE v2 IPv4 GID is at another index than on the other nodes: check the netdev's IPv4 "
                       "address and VLAN setup, or pin NCCL_IB_GID_INDEX only where the tables agree"}
SOURCE = "roce-config"


@dataclass(frozen=True)
class RoceConsistency:
    name: str = "fleet.roce"
    reads: tuple[str, ...] = ("infiniband",)  # from the store: its ``roce`` ports are not in results.json
    min_hosts: int = 2

    def keep(self, probe: str, observation: Any) -> Any:
        """Of a host's ``infiniband`` observations, its RoCE ports' configuration."""
        return {"roce": observation.get("roce")} if isinstance(observation, Mapping) else None

    def evaluate_fleet(self, observations: Mapping[str, Mapping[str, Any]], hosts: Mapping[str, Host],
                       profiles: Mapping[str, Profile]) -> list[Finding]:
        groups: dict[str, dict[str, Mapping[str, Mapping[str, str]]]] = {}
        for name, obs in observations.items():
            host = hosts.get(name)
            ib = obs.get("infiniband")
            roce = ib.get("roce") if isinstance(ib, Mapping) else None
            if host is not None and host.profile and isinstance(roce, Mapping) and roce:
                groups.setdefault(host.profile, {})[name] = roce
        findings: list[Finding] = []
        for profile_name, by_host in sorted(groups.items()):
            if len(by_host) >= self.min_hosts:
                findings += compare_ports(by_host, profiles.get(profile_name, EMPTY_PROFILE), profile_name)
        return findings


def compare_ports(by_host: Mapping[str, Mapping[str, Mapping[str, str]]], profile: Profile,
                  profile_name: str) -> list[Finding]:
    """Per field, each port against the pin or the majority of the ports of these hosts."""
    out: list[Finding] = []
    flagged: set[str] = set()
    for field in FIELDS:
        values = {(host, port): str(fields[field]) for host, ports in by_host.items()
                  for port, fields in ports.items() if isinstance(fields, Mapping) and field in fields}
        if not values:
            continue
        pin = profile.expect(f"roce.{field}")
        top, _ = majority({f"{h} {p}": v for (h, p), v in values.items()})
        agreeing = sum(1 for v in values.values() if v == top)
        for (host, port), value in sorted(values.items()):
            if pin is not None:
                if passes(pin, value):
                    continue
                status, expected = Status(pin.severity), expected_text(pin)
                why = f"off the profile pin {expected} (source: {pin.source})"
            elif value != top:
                status, expected = Status.WARN, str(top)
                why = f"differs from the fleet majority {top} ({agreeing} of {len(values)} ports of profile " \
                      f"{profile_name})"
            else:
                continue
            flagged.add(host)
            out.append(Finding(host=host, check=f"fleet.roce.{field}", component=port, status=status, value=value,
                               expected=expected, source=SOURCE, remedy=REMEDY[field],
                               message=f"{port}: {LABEL[field]} {value} {why}"))
    for host, ports in sorted(by_host.items()):
        reported = sorted({f for fields in ports.values() if isinstance(fields, Mapping) for f in fields})
        if host not in flagged and reported:  # nothing reported: nothing compared, no PASS
            out.append(Finding(host=host, check="fleet.roce", status=Status.PASS, value=len(ports), source=SOURCE,
                               message=f"{len(ports)} RoCE ports agree with the fleet of profile {profile_name} on "
                                       f"{', '.join(reported)}"))
    return out


CHECK = register_fleet(RoceConsistency())
