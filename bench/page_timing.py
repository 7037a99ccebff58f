"""How long a report page takes in headless Chromium, start-up excluded: navigation start to the first
frame after the load event (the page parsed, its script run, the host table built and laid out).

    python bench/page_timing.py runs/20261122T031500Z/report.html --rounds 3

Talks to Chromium over the DevTools protocol on a loopback port (needs the ``websocket-client``
package; ``bench/report_10k.py --browser`` falls back to ``--dump-dom`` wall times without it). Also
reports the renderer's main-thread busy time (``TaskDuration``), which the other tenants of a shared
machine disturb less than wall time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-extensions", "--disable-background-networking", "--remote-debugging-port=0")
# After the load event: two animation frames, so style, layout and the first paint are included.
AFTER_LOAD = """new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => {
  const nav = performance.getEntriesByType("navigation")[0];
  done(JSON.stringify({interactive_ms: performance.now(), dom_interactive_ms: nav.domInteractive,
                       dom_content_loaded_ms: nav.domContentLoadedEventEnd, load_ms: nav.loadEventEnd}));
})))"""


class Session:
    """One page target of a running Chromium: send a command, wait for its reply or an event."""

    def __init__(self, url: str) -> None:
        import websocket  # websocket-client, optional: only this bench needs it

        self.ws = websocket.create_connection(url, timeout=120, suppress_origin=True)
        self.next_id = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        for _ in range(100_000):  # bounded: events are skipped until the reply arrives
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                return message.get("result", {})
        raise TimeoutError(method)

    def wait_event(self, name: str) -> None:
        for _ in range(100_000):
            if json.loads(self.ws.recv()).get("method") == name:
                return
        raise TimeoutError(name)


def _devtools_port(profile: Path, proc: subprocess.Popen, timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    marker = profile / "DevToolsActivePort"
    while time.monotonic() < deadline and proc.poll() is None:
        if marker.is_file() and marker.read_text().strip():
            return int(marker.read_text().split()[0])
        time.sleep(0.05)
    raise RuntimeError("Chromium did not open its DevTools port")


def measure(page: Path) -> dict[str, float]:
    """One fresh Chromium: open ``page`` and time it (milliseconds since navigation start)."""
    import urllib.request

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        raise RuntimeError("chromium: not installed")
    with tempfile.TemporaryDirectory(prefix="page-timing-") as profile:
        proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            port = _devtools_port(Path(profile), proc)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as reply:
                target = next(t for t in json.load(reply) if t.get("type") == "page")
            session = Session(target["webSocketDebuggerUrl"])
            session.call("Page.enable")
            session.call("Performance.enable")
            before = {m["name"]: m["value"] for m in session.call("Performance.getMetrics")["metrics"]}
            session.call("Page.navigate", url=page.resolve().as_uri())
            session.wait_event("Page.loadEventFired")
            reply = session.call("Runtime.evaluate", expression=AFTER_LOAD, awaitPromise=True, returnByValue=True)
            timing = json.loads(reply["result"]["value"])
            after = {m["name"]: m["value"] for m in session.call("Performance.getMetrics")["metrics"]}
            timing["main_thread_busy_ms"] = (after["TaskDuration"] - before["TaskDuration"]) * 1000
            timing["dom_nodes"] = after.get("Nodes", 0)
            session.ws.close()
            return timing
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


def summary(page: Path, rounds: int = 3) -> str:
    runs = [measure(page) for _ in range(rounds)]
    best = {key: min(r[key] for r in runs) for key in runs[0]}
    return (f"{page.name} ({page.stat().st_size / 1e6:.1f} MB) in Chromium, min of {rounds}: interactive "
            f"{best['interactive_ms']:.0f} ms from navigation start (DOM interactive {best['dom_interactive_ms']:.0f}, "
            f"load {best['load_ms']:.0f}); renderer main thread busy {best['main_thread_busy_ms']:.0f} ms; "
            f"{best['dom_nodes']:.0f} DOM nodes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for page in args.pages:
        print(summary(page, args.rounds))


if __name__ == "__main__":
    main()
