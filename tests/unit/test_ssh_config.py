"""ssh_config read as OpenSSH reads it: every directive the README lists changes the resolved spec."""

from __future__ import annotations

import getpass
import os
from pathlib import Path

import pytest

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Host
from healthcheck.transport.sshconfig import SshConfigError, load_ssh_config, lookup, resolve
from healthcheck.transport.sshjump import JumpHop, parse_jumps


def _config(tmp_path: Path, text: str, name: str = "config") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _spec(tmp_path, text, host="gpu01", **host_vars):
    return resolve(Host(name=host, **host_vars), load_ssh_config(_config(tmp_path, text)))


def test_every_listed_directive_is_honoured(tmp_path):
    spec = _spec(tmp_path, f"""
Host gpu01
  HostName 10.1.0.1
  User ops
  Port 2222
  IdentityFile ~/.ssh/id_%h_%r
  IdentitiesOnly yes
  UserKnownHostsFile {tmp_path}/kh_%h {tmp_path}/kh2
  GlobalKnownHostsFile {tmp_path}/global
  HostKeyAlias gpu01-key
  ConnectTimeout 7
  ServerAliveInterval 5
  ServerAliveCountMax 2
  ProxyJump admin@bastion:2200,inner
Host *
  User nobody
  Port 22
  IdentityFile ~/.ssh/second
""")
    assert (spec.hostname, spec.user, spec.port) == ("10.1.0.1", "ops", 2222)
    home = os.path.expanduser("~")
    assert spec.identity_files == (f"{home}/.ssh/id_10.1.0.1_ops", f"{home}/.ssh/second")  # accumulates
    assert spec.identities_only is True
    assert spec.known_hosts_files == (f"{tmp_path}/kh_10.1.0.1", f"{tmp_path}/kh2")
    assert spec.global_known_hosts_files == (f"{tmp_path}/global",)
    assert spec.host_key_alias == "gpu01-key"
    assert spec.connect_timeout_s == 7.0
    assert (spec.server_alive_interval_s, spec.server_alive_count_max) == (5.0, 2)
    assert spec.jumps == (JumpHop("admin", "bastion", 2200), JumpHop(None, "inner", None))
    assert spec.proxy_command is None


def test_defaults_when_nothing_is_configured(tmp_path):
    spec = _spec(tmp_path, "Host other\n  User x\n")
    assert (spec.hostname, spec.port, spec.user, spec.jumps) == ("gpu01", 22, getpass.getuser(), ())
    assert spec.known_hosts_files[0] == os.path.expanduser("~/.ssh/known_hosts")
    assert (spec.server_alive_interval_s, spec.server_alive_count_max) == (
        DEFAULTS.server_alive_interval_s, DEFAULTS.server_alive_count_max)


def test_inventory_vars_win(tmp_path):
    spec = _spec(tmp_path, "Host gpu01\n  HostName 10.0.0.1\n  User ops\n  Port 2222\n",
                 address="127.0.1.5", user="me", port=2201)
    assert (spec.hostname, spec.user, spec.port) == ("127.0.1.5", "me", 2201)


def test_include_relative_glob_and_conditional(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh" / "conf.d").mkdir(parents=True)
    (tmp_path / ".ssh" / "conf.d" / "10-users.conf").write_text("Host gpu*\n  User included\n")
    (tmp_path / ".ssh" / "conf.d" / "20-jump.conf").write_text("ProxyJump bastion\n")
    (tmp_path / "only-for-login").write_text("Port 2022\n")
    config = load_ssh_config(_config(tmp_path, f"""
Include conf.d/*.conf
Host login*
  Include {tmp_path}/only-for-login
  User loginuser
"""))
    gpu = resolve(Host("gpu07"), config)
    assert gpu.user == "included" and gpu.jumps == (JumpHop(None, "bastion", None),)
    assert gpu.port == 22  # the Include inside "Host login*" applies only there
    login = resolve(Host("login1"), config)
    assert (login.port, login.user) == (2022, "loginuser")


def test_include_loop_is_refused(tmp_path):
    _config(tmp_path, f"Include {tmp_path}/b\n", "a")
    _config(tmp_path, f"Include {tmp_path}/a\n", "b")
    with pytest.raises(SshConfigError, match="deeper than 16"):
        load_ssh_config(tmp_path / "a")


def test_first_value_wins_and_proxyjump_competes_with_proxycommand(tmp_path):
    spec = _spec(tmp_path, "Host gpu01\n  ProxyCommand nc -X connect %h %p\n  User first\n"
                           "Host *\n  ProxyJump bastion\n  User second\n")
    assert spec.jumps == () and spec.user == "first"
    assert spec.proxy_command == "nc -X connect gpu01 22"
    spec = _spec(tmp_path, "Host *\n  ProxyJump none\n  ProxyCommand nc %h %p\n")
    assert spec.jumps == () and spec.proxy_command is None


def test_proxycommand_tokens_are_quoted(tmp_path):
    spec = _spec(tmp_path, "Host *\n  ProxyCommand ssh -W %h:%p %r@bastion\n", host="x", address="a;touch b",
                 user="u$(id)")
    assert spec.proxy_command == "ssh -W 'a;touch b':22 'u$(id)'@bastion"


def test_match_host_user_and_negation(tmp_path):
    text = """
Host gpu01
  HostName 10.2.0.1
Match host 10.2.0.* !user root
  Port 2200
Match originalhost gpu0? user ops
  IdentityFile /keys/ops
"""
    spec = _spec(tmp_path, text, user="ops")
    assert spec.port == 2200 and spec.identity_files == ("/keys/ops",)
    assert _spec(tmp_path, text, user="root").port == 22


def test_match_exec_is_refused_only_where_it_is_reached(tmp_path):
    text = "Match host login* exec \"test -f /tmp/x\"\n  User viaexec\nHost *\n  User plain\n"
    assert _spec(tmp_path, text).user == "plain"  # the host criterion failed first: exec never evaluated
    with pytest.raises(SshConfigError, match=r"config:1: 'Match exec' .*--ssh-client openssh"):
        _spec(tmp_path, text, host="login1")


@pytest.mark.parametrize("line", ["CertificateFile ~/.ssh/id-cert.pub", "PKCS11Provider /usr/lib/p11.so",
                                  "CanonicalizeHostname yes", "KnownHostsCommand /bin/true"])
def test_openssh_only_directives_are_refused_with_the_line(tmp_path, line):
    with pytest.raises(SshConfigError, match=r"config:2: .*--ssh-client openssh"):
        _spec(tmp_path, f"Host gpu*\n  {line}\n")
    assert _spec(tmp_path, f"Host login*\n  {line}\n").hostname == "gpu01"


def test_quoted_values_and_equals_syntax(tmp_path):
    spec = _spec(tmp_path, 'Host gpu01\n  User="ops team"\n  IdentityFile "/keys/with space"\n  Port=2200\n')
    assert (spec.user, spec.identity_files, spec.port) == ("ops team", ("/keys/with space",), 2200)


def test_bad_lines_name_file_and_line(tmp_path):
    with pytest.raises(SshConfigError, match=r"config:2: cannot parse"):
        load_ssh_config(_config(tmp_path, "Host a\n  = broken\n"))
    with pytest.raises(SshConfigError, match=r"config:2: Port 'abc'"):
        _spec(tmp_path, "Host gpu01\n  Port abc\n")


def test_lookup_visits_only_the_hosts_own_blocks(tmp_path):
    blocks = "".join(f"Host gpu{i:04d}\n  HostName 10.3.{i // 256}.{i % 256}\n" for i in range(4000))
    config = load_ssh_config(_config(tmp_path, blocks + "Host *\n  User ops\n"))
    assert len(config.candidates("gpu1234")) == 2  # its own block and "Host *"
    assert lookup(config, "gpu1234")["hostname"] == [("10.3.4.210", f"{tmp_path}/config:2470")]
    assert resolve(Host("gpu3999"), config).user == "ops"


def test_parse_jumps_forms():
    assert parse_jumps("ssh://u@[fe80::1]:2222,h2:22,h3") == (
        JumpHop("u", "fe80::1", 2222), JumpHop(None, "h2", 22), JumpHop(None, "h3", None))
    with pytest.raises(ValueError, match="cannot parse ProxyJump hop"):
        parse_jumps("h1:notaport")
