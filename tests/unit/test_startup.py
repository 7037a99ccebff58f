"""Start-up and exit of the command: a replay and a report never import the heavy libraries only other
commands use, and the console command (``cli.entry``) ends with its exit status and everything written.

pandas (``healthcheck assets``) and paramiko (the ssh transport) cost about 0.3 s each to import;
every CLI call paid both. They are imported where they are used, and these tests fail if either
comes back on the replay path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "inventories" / "samples" / "h100-4node"
HEAVY = ("pandas", "numpy", "paramiko", "invoke", "fabric")

RUN = """
import json, sys
from healthcheck.cli.main import main
try:
    main(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})))
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _imported(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", RUN.format(heavy=set(HEAVY)), *args], capture_output=True,
                          text=True, env=_env(), timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_replay_and_report_import_neither_pandas_nor_paramiko(tmp_path):
    run_dir = tmp_path / "run"
    assert _imported("run", "--replay", str(SAMPLE), "--run-dir", str(run_dir)) == []
    assert (run_dir / "results.json").is_file()  # the replay did run
    assert _imported("report", str(run_dir)) == []


def test_the_commands_that_need_them_still_get_them(tmp_path):
    from healthcheck.transport import open_transport
    from healthcheck.transport.ssh import SshTransport

    assert isinstance(open_transport("ssh"), SshTransport)  # registered by name, its module loaded on first use
    run_dir = tmp_path / "run"
    _imported("run", "--replay", str(SAMPLE), "--run-dir", str(run_dir))
    assert "pandas" in _imported("assets", str(run_dir), "--csv")


def _command(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m healthcheck ARGS``: the console command, whose process ends by ``cli.entry``."""
    return subprocess.run([sys.executable, "-m", "healthcheck", *args], capture_output=True, text=True, env=_env(),
                          timeout=120)


def test_the_command_ends_with_its_exit_status_and_everything_written(tmp_path):
    from click.testing import CliRunner

    from healthcheck.cli.main import main

    run_dir = tmp_path / "run"
    done = _command("run", "--replay", str(SAMPLE), "--run-dir", str(run_dir))
    in_process = CliRunner().invoke(main, ["run", "--replay", str(SAMPLE), "--run-dir", str(tmp_path / "again")])
    assert done.returncode == in_process.exit_code == 1  # the sample has failing hosts
    assert "verdict FAIL" in done.stdout and done.stdout.rstrip().endswith(str(run_dir / "report.html"))
    results = json.loads((run_dir / "results.json").read_text())
    assert results["summary"]["hosts"] == 4
    assert not (run_dir / "findings.jsonl").exists()  # a replay keeps no journal
    table = (run_dir / "findings.table.json.gz").read_bytes()
    assert table == (tmp_path / "again" / "findings.table.json.gz").read_bytes()
    assert _command("--version").returncode == 0
    usage = _command("run", "--replay", str(tmp_path / "missing"))
    assert usage.returncode == 2 and "missing" in usage.stderr


def test_exit_status_is_what_sys_exit_gives(capsys):
    from healthcheck.cli.main import _exit_status

    assert [_exit_status(c) for c in (None, 0, 1, 2, 130, 256 + 3)] == [0, 0, 1, 2, 130, 3]
    assert _exit_status("stopped: disk full") == 1
    assert capsys.readouterr().err == "stopped: disk full\n"
