"""The study page against its goals: a 1,000-trial study's page load under 300 ms, and a journal
change on the page within 2 s (issue 27). Real server process, Debian's chromium via Playwright.

Prints each measure beside its goal (ratio < 1 meets it): the API's reply for the study (cold:
the journal's new lines read; warm: cached), the page's HTML (its first screen inlined), the
page in the browser from navigation to its first table row painted (Element Timing's
renderTime) and to the whole table ready (the view its event stream brings), and a journal
line from its write to the page redrawn by the server's event stream.

    python bench/study_page.py [--trials 1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "autoresearch" / "web"))

from synthetic_study import write_journal  # noqa: E402
from web_helpers import serving  # noqa: E402

LOAD_GOAL_MS = 300.0
LIVE_GOAL_MS = 2000.0
# the first table row's paint, as the browser reports it (Element Timing: the page marks each
# row's first cell with elementtiming=trial-row)
ROW_PAINT_JS = """new Promise((done) => new PerformanceObserver((list) => {
  const times = list.getEntries().map((e) => e.renderTime || e.loadTime);
  done(Math.min(...times));
}).observe({ type: "element", buffered: true }))"""
NAV_JS = "performance.getEntriesByType('navigation')[0].responseEnd"
FCP_JS = (
    "performance.getEntriesByType('paint').find(e => e.name === 'first-contentful-paint').startTime"
)


def _get_ms(url: str) -> float:
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as r:
        r.read()
    return (time.perf_counter() - t) * 1000


def _append(folder: Path, *events: dict) -> None:
    with open(folder / "journal.jsonl", "a") as f:
        for e in events:
            f.write(json.dumps({"ts": time.time(), **e}) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        sys.exit("no chromium on PATH: apt-get install chromium")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "studies"
        folder = write_journal(root / "big", args.trials, name="big", stopped=False)
        n = args.trials
        # one more trial, running: the live measure finishes it
        _append(folder,
                {"event": "proposal", "trial": n, "source": "llm", "diff": {"lr": 0.01},
                 "config": {"lr": 0.01, "depth": 2}},
                {"event": "launched", "trial": n, "job_id": "jobX", "attempt": 1, "gpus": 1},
                {"event": "job_started", "trial": n, "started_at": time.time()})  # fmt: skip
        with serving(root, env={"AIR_HOME": str(Path(tmp) / "home")}) as base:
            url = f"{base}/api/studies/big"
            cold = []
            for _ in range(args.rounds):
                _append(folder, {"event": "warning", "message": "bench: a new line"})
                cold.append(_get_ms(url))
            warm = [_get_ms(url) for _ in range(args.rounds)]
            html = [_get_ms(f"{base}/studies/big") for _ in range(args.rounds)]
            loads, paints, fcps, alls, lives, got, tiny = [], [], [], [], [], [], []
            wholes: list[float] = []
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
                for _ in range(args.rounds):
                    page = browser.new_page(viewport={"width": 1280, "height": 900})
                    page.goto(f"{base}/studies/big")
                    page.wait_for_function("window.AIR_RENDERED", timeout=60_000)
                    loads.append(page.evaluate("window.AIR_FIRST_DRAWN.at_ms"))
                    paints.append(page.evaluate(ROW_PAINT_JS))
                    got.append(page.evaluate(NAV_JS))
                    fcps.append(page.evaluate(FCP_JS))
                    # a big study's first screen first: then the whole table, by its stream
                    page.wait_for_function(f"window.AIR_ROWS_DONE.n === {n + 1}", timeout=60_000)
                    wholes.append(page.evaluate("window.AIR_ROWS_DONE.at_ms"))
                    page.eval_on_selector(".table-wrap", "w => w.scrollTop = w.scrollHeight")
                    t = time.perf_counter()
                    page.wait_for_selector(f'#trials tr.trial[data-n="{n - 1}"]', timeout=30_000)
                    alls.append((time.perf_counter() - t) * 1000)
                    page.close()
                    # side by side: the same browser's first paint of a tiny page (the list)
                    page = browser.new_page(viewport={"width": 1280, "height": 900})
                    page.goto(f"{base}/")
                    page.wait_for_selector("#studies a", timeout=60_000)
                    tiny.append(page.evaluate(FCP_JS))
                    page.close()
                page = browser.new_page()
                page.goto(f"{base}/studies/big")
                page.wait_for_function("window.AIR_LIVE && window.AIR_LIVE.mode", timeout=60_000)
                for r in range(args.rounds):
                    before = page.evaluate("window.AIR_RENDERED.version")
                    t = time.perf_counter()
                    _append(folder, {"event": "warning", "message": f"bench live {r}"})
                    page.wait_for_function(
                        f"window.AIR_RENDERED.version !== {json.dumps(before)}", timeout=30_000
                    )
                    lives.append((time.perf_counter() - t) * 1000)
                mode = page.evaluate("window.AIR_LIVE.mode")
                browser.close()

    def row(name: str, values: list[float], goal: float | None) -> None:
        p50 = statistics.median(values)
        ratio = f"{p50 / goal:.2f}x goal ({goal:.0f} ms)" if goal else ""
        print(f"{name:<52} p50 {p50:8.1f} ms  max {max(values):8.1f} ms  {ratio}")

    load = os.getloadavg()[0]
    print(f"study page, {args.trials} trials, {args.rounds} rounds each (load average {load:.1f})")
    row("API /api/studies/{name}, journal changed", cold, None)
    row("API /api/studies/{name}, unchanged (cached)", warm, None)
    row("page HTML (view inlined), cached", html, None)
    row("page: navigation -> its HTML received (server's part)", got, None)
    row("page: navigation -> drawn (chart, table in view)", loads, LOAD_GOAL_MS)
    row("page: navigation -> first rows painted", paints, LOAD_GOAL_MS)
    row("page: navigation -> first contentful paint", fcps, LOAD_GOAL_MS)
    row("page: navigation -> the whole table (all trials) ready", wholes, None)
    row("a tiny page (the studies list): first contentful paint", tiny, None)
    ratio = statistics.median(paints) / statistics.median(tiny)
    print(f"{'first rows painted / the tiny page s first paint':<52} {ratio:.2f}x")
    row("table: scrolled to the last trial -> its row drawn", alls, None)
    row(f"live: journal line -> page redrawn ({mode})", lives, LIVE_GOAL_MS)


if __name__ == "__main__":
    main()
