"""Screenshots of web pages through headless Chromium's DevTools protocol (used by
``scripts/mlflow_screenshots.sh``): each page is opened, left to render, its folded parts
unfolded, and captured as a PNG.

Chromium's own ``--screenshot`` cannot act on a page; the MLflow UI needs two things done first:
its training-runs view chosen and its assistant panel (which opens on a first visit) closed,
both kept in the page's ``localStorage``.

    python scripts/ui_screenshots.py --chromium /usr/bin/chromium --pages pages.txt --out docs/mlflow

``pages.txt`` holds one ``<name> <url>`` per line; ``<out>/<name>.png`` is written for each.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from websockets.sync.client import connect

#: the MLflow UI's state for a first visit (its ``useLocalStorage`` keys, ``<key>_v1``, JSON values)
MLFLOW_UI_STATE = {
    "mlflow.workflowType_v1": json.dumps("machine_learning"),
    "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": "true",
    "mlflow.assistant.panelOpen_v1": "false",
}
#: clicked on every page once it rendered: the assistant's close button, a folded description
CLICK = 'button[aria-label="Close"], button[aria-label="Expand description"]'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Page:
    """One Chromium tab, driven over its DevTools websocket."""

    def __init__(self, websocket_url: str) -> None:
        self.ws = connect(websocket_url, max_size=None, open_timeout=30)
        self.ids = itertools.count(1)

    def call(self, method: str, **params):
        i = next(self.ids)
        self.ws.send(json.dumps({"id": i, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=120))
            if message.get("id") == i:
                if "error" in message:
                    raise RuntimeError(f"Chromium refused {method}: {message['error']}")
                return message.get("result", {})

    def js(self, expression: str):
        answer = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return answer.get("result", {}).get("value")

    def open(self, url: str, *, settle_s: float) -> None:
        self.call("Page.navigate", url=url)
        time.sleep(settle_s)

    def rendered(self, *, timeout_s: float, settle_s: float) -> bool:
        """Wait until the page shows no loading skeleton and its text has stopped changing for
        ``settle_s`` (a loaded machine renders slowly); False when ``timeout_s`` passes first."""
        probe = ("[document.querySelectorAll('[class*=\"skeleton\" i], [class*=\"spinner\" i], [aria-busy=\"true\"]').length,"
                 " document.body ? document.body.innerText.length : 0]")
        deadline, last, steady_since = time.monotonic() + timeout_s, None, None
        while time.monotonic() < deadline:
            busy, length = self.js(probe) or [1, 0]
            now = time.monotonic()
            if busy or length != last:
                last, steady_since = length, now
            elif now - steady_since >= settle_s:
                return True
            time.sleep(0.5)
        return False

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chromium", required=True, help="the Chromium (or Chrome) executable")
    parser.add_argument("--pages", required=True, type=Path, help="file of '<name> <url>' lines")
    parser.add_argument("--out", required=True, type=Path, help="folder for the PNGs")
    parser.add_argument("--width", type=int, default=1600)
    parser.add_argument("--height", type=int, default=2000)
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds a page's text must stay unchanged, no loading skeleton left, before the capture (default 3)")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds a page may take to render at most (default 90)")
    args = parser.parse_args()

    pages = [line.split(maxsplit=1) for line in args.pages.read_text().splitlines() if line.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="orchrm-chromium-") as profile:
        # --no-sandbox: Chromium refuses to start as root without it; the pages are a loopback UI
        chromium = subprocess.Popen(
            [args.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             "--disable-dev-shm-usage", f"--remote-debugging-port={port}", f"--user-data-dir={profile}",
             f"--window-size={args.width},{args.height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            targets = None
            for _ in range(120):
                try:
                    targets = httpx.get(f"http://127.0.0.1:{port}/json", timeout=2).json()
                    break
                except httpx.TransportError:
                    if chromium.poll() is not None:
                        raise SystemExit(f"{args.chromium} exited with status {chromium.returncode} before it answered") from None
                    time.sleep(0.5)
            if targets is None:
                raise SystemExit(f"{args.chromium} did not open its DevTools port {port} within 60 s")
            page = Page(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"])
            page.call("Page.enable")
            page.call("Emulation.setDeviceMetricsOverride", width=args.width, height=args.height, deviceScaleFactor=1, mobile=False)
            # the UI's state lives in the origin's localStorage: set it on the origin, before any page
            page.open(pages[0][1].split("#")[0], settle_s=3)
            page.js(";".join(f"localStorage.setItem({json.dumps(k)}, {json.dumps(v)})" for k, v in MLFLOW_UI_STATE.items()))
            for name, url in pages:
                page.open(url, settle_s=1)
                if not page.rendered(timeout_s=args.timeout, settle_s=args.settle):
                    print(f"{name}: still loading after {args.timeout:g} s; captured as it is", file=sys.stderr)
                page.js(f"document.querySelectorAll({json.dumps(CLICK)}).forEach(e => e.click())")
                page.rendered(timeout_s=args.timeout, settle_s=1)
                page.screenshot(args.out / f"{name}.png")
                print(f"{args.out / f'{name}.png'}: {url}")
        finally:
            chromium.terminate()
            chromium.wait(timeout=30)


if __name__ == "__main__":
    main()
