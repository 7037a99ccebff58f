"""Start-up: a replay and a report never import the heavy libraries only other commands use.

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
from healthcheck.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})))
"""


def _imported(*args: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", RUN.format(heavy=set(HEAVY)), *args], capture_output=True,
                          text=True, env=env, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_replay_and_report_import_neither_pandas_nor_paramiko(tmp_path):
    run_dir = tmp_path / "run"
    assert _imported("run", "--replay", str(SAMPLE), "--run-dir", str(run_dir)) == []
    assert (run_dir / "results.json").is_file()  # the replay did run
    assert _imported("report", str(run_dir)) == []


def test_the_commands_that_need_them_still_get_them(tmp_path):
    from healthcheck import transport
    from healthcheck.transport.ssh import SshTransport

    assert transport.SshTransport is SshTransport  # named on the package, loaded on first use
    run_dir = tmp_path / "run"
    _imported("run", "--replay", str(SAMPLE), "--run-dir", str(run_dir))
    assert "pandas" in _imported("assets", str(run_dir), "--csv")
