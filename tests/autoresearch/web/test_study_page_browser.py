"""The study page in a real browser: Debian's chromium driven by Playwright (no browser download).

Against a running study the page shows its trials and a trial that finishes appears without a
reload (by server-sent events; if the stream is refused, by polling); clicking a code trial
shows its patch; a 1,000-trial study loads. Skipped, saying why,
where chromium or Playwright is missing (``make install`` installs both).
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ar_helpers import small_study, start_loop
from synthetic_study import write_journal
from web_helpers import serving, with_token

pytestmark = pytest.mark.slow
SCREENSHOT = Path(__file__).resolve().parents[3] / "docs" / "study-page.png"


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    exe = _chromium()
    if exe is None:
        pytest.skip("no chromium on PATH: `apt-get install chromium` (make install does it)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright is not installed: pip install -e '.[dev]'")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser) -> Iterator[object]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    ctx.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def test_a_running_study_shows_its_trials_and_a_finishing_trial_appears_without_reload(
    page, study_home: Path, tmp_path: Path
) -> None:
    study = small_study(
        name="live",
        base_config={"steps": 30, "sleep_s": 0.5, "log": "mlflow"},  # 15 s each
        budget={"trials": 3, "concurrency": 1},
    )
    study_file = tmp_path / "live.yaml"
    study_file.write_text(yaml.safe_dump(study))
    folder = tmp_path / "studies" / "live"
    loop = start_loop(study_file, folder)
    try:
        with serving(tmp_path / "studies") as base:
            page.goto(with_token(base + "/"))
            page.wait_for_selector("#studies a", timeout=60_000)
            page.click("#studies a")
            page.wait_for_selector("#trials tbody tr.trial", timeout=60_000)
            page.evaluate("window.__sameDocument = true")
            # a running trial's metric curve, read live from MLflow
            page.wait_for_selector("#running svg.curve", timeout=90_000)
            done = "document.querySelectorAll('#trials .s-SUCCEEDED').length"
            first = page.evaluate(done)
            page.wait_for_function(f"{done} > {first}", timeout=120_000)
            assert page.evaluate("window.__sameDocument") is True  # no reload happened
            assert page.inner_text("#trials tbody").count("SUCCEEDED") > first
            # it came by the server's event stream, not by polling
            live = page.evaluate("window.AIR_LIVE")
            assert live["mode"] == "sse" and live["events"] > 0 and live["polls"] == 0, live
    finally:
        if loop.poll() is None:
            loop.send_signal(signal.SIGTERM)
        loop.wait(timeout=60)


def test_without_its_event_stream_the_page_polls(page, tmp_path: Path) -> None:
    folder = write_journal(tmp_path / "studies" / "quiet", 5, name="quiet")
    with serving(tmp_path / "studies") as base:
        page.route("**/events*", lambda route: route.abort())  # the stream refused on the way
        page.goto(with_token(base + "/studies/quiet"))
        page.wait_for_selector("#trials tbody tr.trial")
        page.wait_for_function("window.AIR_LIVE.mode === 'poll'")
        before = page.evaluate("window.AIR_RENDERED.version")
        with open(folder / "journal.jsonl", "a") as f:  # a warning line: the view changes
            f.write(json.dumps({"event": "warning", "ts": time.time(), "message": "polled"}) + "\n")
        page.wait_for_function(f"window.AIR_RENDERED.version !== {json.dumps(before)}")
        assert page.evaluate("window.AIR_LIVE.polls") > 0


def test_clicking_a_code_trial_shows_its_patch(page, tmp_path: Path) -> None:
    write_journal(tmp_path / "studies" / "code", 60, name="code-study", code_every=7)
    with serving(tmp_path / "studies") as base:
        page.goto(with_token(base + "/studies/code-study"))
        page.wait_for_selector("#trials tbody tr.code")
        row = page.locator("#trials tbody tr.code").nth(1)
        n = row.get_attribute("data-n")
        row.click()
        page.wait_for_selector("#patch")
        assert f"Trial {n}" in page.inner_text("#detail")
        assert "+++ b/train.py" in page.inner_text("#patch")
        assert "+lr = " in page.inner_text("#patch")
        # the lineage, below the fold, is drawn once the first screen is painted
        page.wait_for_selector("#lineage a[data-n]")
        assert page.locator("#lineage a[data-n]").count() == 9  # trials 3, 10, ..., 59
        # sorting and filtering: the table answers without the server
        page.click("#trials th[data-k=value]")
        values = page.eval_on_selector_all(
            "#trials tbody tr.trial", "rs => rs.map(r => r.children[5].innerText)"
        )
        nums = [float(v.split()[0]) for v in values if v.strip()]
        assert nums == sorted(nums)
        page.select_option("#status", "FAILED")
        failed = page.locator("#trials tbody tr.trial")
        assert failed.count() == page.locator("#trials .s-FAILED").count() == 4  # 5, 22, 39, 56
        page.select_option("#status", "")
        page.click("#trials th[data-k=n]")  # back to trial order: the trial is in view again
        page.click(f'#trials tr.trial[data-n="{n}"]')
        page.wait_for_selector("#patch")
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert SCREENSHOT.stat().st_size > 10_000


def test_a_study_of_a_thousand_trials_loads(page, tmp_path: Path) -> None:
    write_journal(tmp_path / "studies" / "big", 1000, name="big")
    with serving(tmp_path / "studies") as base:
        page.goto(with_token(base + "/studies/big"))
        page.wait_for_function("window.AIR_ROWS_DONE && window.AIR_ROWS_DONE.n === 1000")
        assert page.inner_text("#shown") == "1000 of 1000 trials"
        # only the rows in view are drawn; scrolled to the end, the last trial's row is there
        assert 10 < page.locator("#trials tbody tr.trial").count() < 200
        page.eval_on_selector(".table-wrap", "w => w.scrollTop = w.scrollHeight")
        page.wait_for_selector('#trials tr.trial[data-n="999"]')
        dots = page.eval_on_selector_all(
            "#chart path.pts", "ps => ps.reduce((n, p) => n + +p.dataset.count, 0)"
        )
        failed = int(page.get_attribute("#chart path.failed", "data-count"))
        assert dots > 900 and dots + failed == 1000  # a failed trial has no value: a mark
        assert page.locator("#chart path.best").count() == 1
        # how fast: bench/study_page.py (no timed assertions in tests)


def test_a_big_study_s_first_rows_paint_without_its_whole_view(page, tmp_path: Path) -> None:
    write_journal(tmp_path / "studies" / "big", 400, name="big", code_every=7)
    with serving(tmp_path / "studies") as base:
        # neither the stream nor a poll can bring the whole view: the first screen stands alone
        page.route("**/events*", lambda route: route.abort())
        page.route("**/api/studies/big", lambda route: route.abort())
        page.goto(with_token(base + "/studies/big"))
        page.wait_for_selector('#trials tr.trial[data-n="0"]')
        page.wait_for_function("performance.getEntriesByType('paint').length > 0")  # painted
        assert page.inner_text("#shown") == "the first 40 of 400 trials (loading the rest)"
        assert page.locator("#chart path.best").count() == 1
        assert page.locator("#lineage a[data-n]").count() == 0  # below the fold: comes with it
        page.unroute("**/events*")
        page.unroute("**/api/studies/big")  # the page's next poll brings it
        page.wait_for_function("window.AIR_ROWS_DONE && window.AIR_ROWS_DONE.n === 400")
        assert page.inner_text("#shown") == "400 of 400 trials"
        page.wait_for_selector("#lineage a[data-n]")
        assert page.locator("#lineage a[data-n]").count() == 57  # trials 3, 10, ..., 395


def test_the_html_report_works_from_a_file(page, tmp_path: Path) -> None:
    from autoresearch.web.serve import write_html

    folder = write_journal(tmp_path / "shared", 30, name="shared", code_every=7)
    html = write_html(folder)
    page.goto(html.as_uri())  # file://: no server behind it, the data is in the page
    page.wait_for_selector("#trials tbody tr.trial")
    assert page.inner_text("#shown") == "30 of 30 trials"
    assert "shared" in page.inner_text("#title")
    page.click('#trials tr.trial[data-n="10"]')  # a code trial: its patch is inlined too
    page.wait_for_selector("#patch")
    assert "+lr = " in page.inner_text("#patch")


def test_a_page_on_another_port_cannot_stop_a_study_with_the_cookie(
    page, tmp_path: Path, study_home: Path
) -> None:
    """Issue 37.8 in a real browser: a page on another 127.0.0.1 port is same-site, so Chromium
    sends the study page's cookie with its POST; the Origin it sends gets the POST refused."""
    import secrets
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from web_helpers import get_json

    write_journal(tmp_path / "studies" / "b", 12, name="beta", stopped=False)
    with serving(tmp_path / "studies", env={"AIR_MCP_TOKEN": secrets.token_hex(16)}) as base:
        target = f"{base}/api/studies/beta/stop"
        html = (
            "<title>loading</title><script>fetch(" + json.dumps(target) + ", {method: 'POST',"
            " mode: 'no-cors', credentials: 'include'}).finally(() => document.title = 'sent')"
            "</script>"
        ).encode()

        class Evil(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(html)

            def log_message(self, *args: object) -> None:
                pass

        evil = ThreadingHTTPServer(("127.0.0.1", 0), Evil)
        threading.Thread(target=evil.serve_forever, daemon=True).start()
        try:
            page.goto(with_token(base + "/studies/beta"))  # the user opens the page: the cookie
            page.wait_for_selector("#trials tbody tr.trial")
            page.goto(f"http://127.0.0.1:{evil.server_address[1]}/")
            page.wait_for_function("document.title === 'sent'")
        finally:
            evil.shutdown()
        view = get_json(base + "/api/studies/beta")[1]
        assert view["state"] == "interrupted" and not view.get("stop_reason"), view


def test_a_steering_and_lowest_seen_show_among_the_notes(page, tmp_path: Path) -> None:
    """Issue 39.9/39.5: a steer_study request made while the page is open appears among its
    notes (who steered, what); the lowest single value is named lowest_seen, not the best."""
    from autoresearch.api import steer_study

    folder = write_journal(tmp_path / "studies" / "s", 40, name="steered", seed=0)
    with serving(tmp_path / "studies") as base:
        page.goto(with_token(base + "/studies/steered"))
        page.wait_for_selector("#trials tbody tr.trial")
        notes = page.inner_text("#notes")
        assert "lowest_seen" in notes and "not the best" in notes and "steered" not in notes
        steer_study(folder, note="try a smaller lr", by="alice", admin=True)  # journaled
        page.wait_for_function(
            "document.getElementById('notes').innerText.includes('steered by alice')"
        )
        assert "note: try a smaller lr" in page.inner_text("#notes")


def test_a_trial_s_detail_names_its_outputs(page, study_home: Path, tmp_path: Path) -> None:
    """Issue 38.6: opening a trial names where its job wrote (its checkpoint folder, the
    ./checkpoints and ./runs of its code view), on the live page and in report --html."""
    from test_trial_outputs import outputs_study

    from autoresearch.api import get_study
    from autoresearch.web.serve import write_html

    folder = outputs_study(tmp_path)
    named = get_study(folder)["recent"][0]["outputs"]
    with serving(folder.parent) as base:
        page.goto(with_token(base + "/studies/outputs"))
        page.click('#trials tr.trial[data-n="0"]')
        page.wait_for_selector("#outputs")
        shown = page.inner_text("#outputs")
        assert all(path in shown for path in named) and len(named) == 3, (shown, named)
    page.goto(write_html(folder).as_uri())  # file://: the outputs travel in the file
    page.click('#trials tr.trial[data-n="0"]')
    page.wait_for_selector("#outputs")
    assert all(path in page.inner_text("#outputs") for path in named)
