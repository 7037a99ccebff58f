"""Real OpenSSH ``sshd`` test hosts on loopback addresses (127.0.1.x), started and stopped by tests.

    cluster = SshCluster.start(tmp_path, 3)        # node01..node03
    cluster.add_tool("node02", "nvidia-smi", {"-L": ("GPU 0: ...\\n", 0), "*": ("", 0)})
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile="h100-sxm5-8x")
    # healthcheck run -i inv -F cluster.ssh_config ...
    cluster.stop()

Each host has its own host key, its own sshd (foreground, PID kept, stopped by PID), a log file,
and a bin directory first on PATH (sshd ``SetEnv``) where tool shims replay captured outputs
chosen by their exact argv. ``hostname`` answers the test host's name. Every host is reached by
an explicit 127.x address from the generated ssh_config, so no name goes to DNS.
"""

from __future__ import annotations

import getpass
import os
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def sshd_available() -> bool:
    return os.path.exists(SSHD) and os.path.exists(SSH_KEYGEN)


@dataclass
class TestHost:
    name: str
    address: str
    port: int
    root: Path
    bindir: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    host_key_line: str = ""

    @property
    def sysfs(self) -> Path:
        """The host's tree laid out like /sys (read by the fabric commands when the cluster has ``sysfs``)."""
        return self.root / "sys"

    def write_sysfs(self, dump: str) -> None:
        """Files under ``sysfs`` from ``grep -H`` lines (``/sys/class/...:value``, the ib-sysfs layout);
        a file named on several lines gets them all; ``#`` lines are skipped."""
        lines: dict[Path, list[str]] = {}
        for line in dump.splitlines():
            path, colon, value = line.partition(":")
            if colon and path.startswith("/sys/") and ".." not in path.split("/"):
                lines.setdefault(self.sysfs / path[len("/sys/"):], []).append(value)
        for path, values in lines.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(f"{v}\n" for v in values))

    def sessions(self) -> int:
        """How many sessions (execs) sshd started for this host, from its log."""
        if not self.log.is_file():
            return 0
        return self.log.read_text(errors="replace").count("Starting session:")

    def connections(self) -> int:
        if not self.log.is_file():
            return 0
        return self.log.read_text(errors="replace").count("Accepted publickey")


def _address(subnet: str, octet: int) -> str:
    """``subnet.octet``; past .254 the hosts go on in the next /24 (127.0.2.1, ...): more than 254 hosts."""
    head, _, third = subnet.rpartition(".")
    carry, last = divmod(octet - 1, 254)
    return f"{head}.{int(third) + carry}.{last + 1}"


def _free_port(addresses: Sequence[str]) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind((addresses[0], 0))
            port = s.getsockname()[1]
        if all(_can_bind(a, port) for a in addresses):
            return port
    raise RuntimeError("no free port on the test addresses")


def _can_bind(address: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((address, port))
        except OSError:
            return False
    return True


def _wait_listening(address: str, port: int, proc: subprocess.Popen[bytes], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd on {address}:{port} exited with {proc.returncode}")
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex((address, port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"sshd on {address}:{port} did not start within {timeout_s}s")


@dataclass
class SshCluster:
    base: Path
    hosts: list[TestHost]
    port: int
    client_key: Path
    known_hosts: Path
    ssh_config: Path
    user: str = field(default_factory=getpass.getuser)
    max_startups: str | None = "200:30:400"  # None: OpenSSH's default (10:30:100), as on a real bastion
    sysfs: bool = False  # each host's HEALTHCHECK_SYSFS is its own tree (``write_sysfs``), not /sys
    own_home: bool = False  # HOME is the host's folder: the login shell skips this machine's ~/.bashrc

    @classmethod
    def start(cls, base: Path, count: int, names: Sequence[str] | None = None,
              first_octet: int = 1, subnet: str = "127.0.1",
              max_startups: str | None = "200:30:400", sysfs: bool = False, own_home: bool = False) -> SshCluster:
        base = Path(base)
        base.mkdir(parents=True, exist_ok=True)
        names = list(names or [f"node{i + 1:02d}" for i in range(count)])
        addresses = [_address(subnet, first_octet + i) for i in range(len(names))]
        port = _free_port(addresses)
        client_key = base / "client_ed25519"
        subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(client_key)], check=True)
        (base / "authorized_keys").write_text(Path(f"{client_key}.pub").read_text())
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        hosts = [cls._make_host(base, name, addr, port) for name, addr in zip(names, addresses, strict=True)]
        cluster = cls(base=base, hosts=hosts, port=port, client_key=client_key,
                      known_hosts=base / "known_hosts", ssh_config=base / "ssh_config",
                      max_startups=max_startups, sysfs=sysfs, own_home=own_home)
        try:
            for host in hosts:
                cluster._start_sshd(host)
        except Exception:
            cluster.stop()
            raise
        cluster.known_hosts.write_text("".join(h.host_key_line for h in hosts))
        cluster.write_ssh_config()
        return cluster

    @staticmethod
    def _make_host(base: Path, name: str, address: str, port: int) -> TestHost:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        root = base / "hosts" / safe
        bindir = root / "bin"
        bindir.mkdir(parents=True, exist_ok=True)
        key = root / "ssh_host_ed25519_key"
        subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        pub = Path(f"{key}.pub").read_text().split()
        host = TestHost(name=name, address=address, port=port, root=root, bindir=bindir,
                        log=root / "sshd.log", host_key_line=f"[{address}]:{port} {pub[0]} {pub[1]}\n")
        _write_exec(bindir / "hostname", f"#!/bin/sh\nprintf '%s\\n' {shlex.quote(name)}\n")
        return host

    def _start_sshd(self, host: TestHost) -> None:
        config = host.root / "sshd_config"
        config.write_text("\n".join([
            f"ListenAddress {host.address}:{host.port}",
            f"HostKey {host.root / 'ssh_host_ed25519_key'}",
            f"PidFile {host.root / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.base / 'authorized_keys'}",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no", "LogLevel VERBOSE",
            *([f"MaxStartups {self.max_startups}"] if self.max_startups else []), "MaxSessions 50",
            f"SetEnv PATH={host.bindir}:{BASE_PATH} HC_TEST_HOST={host.root.name}"
            + (f" HEALTHCHECK_SYSFS={host.sysfs}" if self.sysfs else "")
            + (f" HOME={host.root}" if self.own_home else ""),
        ]) + "\n")
        host.proc = subprocess.Popen([SSHD, "-D", "-f", str(config), "-E", str(host.log)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        _wait_listening(host.address, host.port, host.proc)

    def host(self, name: str) -> TestHost:
        return next(h for h in self.hosts if h.name == name)

    def write_ssh_config(self, extra: Mapping[str, Sequence[str]] | None = None) -> Path:
        blocks = []
        for h in self.hosts:
            if not all(c.isalnum() or c in "._-" for c in h.name):
                continue  # not expressible in ssh_config: the inventory carries address and port
            blocks.append("\n".join([
                f"Host {h.name}", f"  HostName {h.address}", f"  Port {h.port}", f"  User {self.user}",
                f"  IdentityFile {self.client_key}", "  IdentitiesOnly yes",
                f"  UserKnownHostsFile {self.known_hosts}", *(extra or {}).get(h.name, ())]))
        blocks.append("\n".join(["Host *", f"  UserKnownHostsFile {self.known_hosts}",
                                 f"  IdentityFile {self.client_key}", f"  User {self.user}"]))
        self.ssh_config.write_text("\n\n".join(blocks) + "\n")
        return self.ssh_config

    def add_tool(self, host: str, tool: str,
                 responses: Mapping[str, tuple] | str | bytes) -> Path:
        """A shim ``tool`` on ``host`` replaying a response chosen by its exact argv (``"$*"``).

        ``responses`` maps an argv string to ``(stdout, rc)`` or ``(stdout, rc, delay_s)``; ``"*"``
        is the fallback. A plain str/bytes is the response to any argv with rc 0.
        """
        if isinstance(responses, str | bytes):
            responses = {"*": (responses, 0)}
        target = self.host(host)
        store = target.root / "responses" / tool
        store.mkdir(parents=True, exist_ok=True)
        cases = []
        for index, (argv, response) in enumerate(responses.items()):
            stdout, rc, *rest = response
            out = store / f"{index}.out"
            out.write_bytes(stdout.encode() if isinstance(stdout, str) else stdout)
            delay = f"sleep {float(rest[0]):g}; " if rest else ""
            pattern = "*" if argv == "*" else shlex.quote(argv)
            cases.append(f"  {pattern}) {delay}cat {shlex.quote(str(out))}; exit {int(rc)};;")
        if "*" not in responses:
            cases.append(f"  *) echo \"{tool}: unsupported arguments: $*\" >&2; exit 2;;")
        body = "#!/bin/sh\ncase \"$*\" in\n" + "\n".join(cases) + "\nesac\n"
        return _write_exec(target.bindir / tool, body)

    def write_inventory(self, path: Path, profile: str | None = "h100-sxm5-8x",
                        host_vars: Mapping[str, Mapping[str, object]] | None = None,
                        extra_hosts: Mapping[str, Mapping[str, object]] | None = None) -> Path:
        """An inventory naming every host with its explicit 127.x address and port."""
        hosts: dict[str, dict[str, object]] = {}
        for h in self.hosts:
            hosts[h.name] = {"address": h.address, "port": h.port, **(host_vars or {}).get(h.name, {})}
        for name, values in (extra_hosts or {}).items():
            hosts[name] = dict(values)
        doc = {"defaults": {"user": self.user, **({"profile": profile} if profile else {})}, "hosts": hosts}
        Path(path).write_text(yaml.safe_dump(doc, sort_keys=False))
        return Path(path)

    def stop(self) -> None:
        """Stop exactly the sshd processes this cluster started."""
        for h in self.hosts:
            if h.proc is not None and h.proc.poll() is None:
                h.proc.terminate()
        for h in self.hosts:
            if h.proc is not None:
                try:
                    h.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    h.proc.kill()
                    h.proc.wait(timeout=5)


def _write_exec(path: Path, body: str) -> Path:
    path.write_text(body)
    path.chmod(0o755)
    return path
