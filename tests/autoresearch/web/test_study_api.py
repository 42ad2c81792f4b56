"""The study page's JSON API over HTTP against a real ``autoresearch serve`` process, its token
rules, the stop action, and ``report --html``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import free_port
from synthetic_study import write_journal
from web_helpers import PIDS, TOKENS, get_json, http, serving, with_token

pytestmark = pytest.mark.slow


@pytest.fixture
def studies(tmp_path: Path) -> Path:
    root = tmp_path / "studies"
    write_journal(root / "a", 40, name="alpha")
    write_journal(root / "b", 12, name="beta", stopped=False)
    return root


def test_the_api_lists_studies_and_gives_one_in_full(studies: Path) -> None:
    with serving(studies) as base:
        status, body = get_json(base + "/api/studies")
        assert status == 200
        by_name = {s["name"]: s for s in body["studies"]}
        assert set(by_name) == {"alpha", "beta"}
        alpha = by_name["alpha"]
        assert alpha["state"] == "finished" and alpha["trials_done"] == 40
        assert alpha["trials_budget"] == 40 and alpha["best"] is not None
        assert alpha["usd"] > 0  # H100 GPU-hours at the table's price, plus LLM dollars
        assert by_name["beta"]["state"] == "interrupted"

        status, headers, raw = http(base + "/api/studies/alpha")
        view = json.loads(raw)
        assert status == 200 and len(view["trials"]) == 40
        row = view["trials"][5]
        for key in ("diff_text", "status", "value", "decision", "duration_s", "usd", "hardware"):
            assert key in row
        assert row["hardware"] == "H100 80GB"  # its class
        assert row["mlflow"].endswith("/runs/run00005")
        assert view["cost"]["usd"] == pytest.approx(alpha["usd"], rel=1e-3)
        assert view["best_so_far"] and view["noise"]["floor"] == 0.03
        assert [n["n"] for n in view["lineage"]] == [3, 13, 23, 33]
        assert view["lineage"][1]["parent"] == 3

        # unchanged: a conditional request is answered 304 (the page's polls cost little)
        again, _, _ = http(base + "/api/studies/alpha", headers={"If-None-Match": headers["etag"]})
        assert again == 304

        status, patch = get_json(base + "/api/studies/alpha/trials/13/patch")
        assert status == 200 and "+lr = " in patch["patch"]
        assert patch["chain"].count("+++ b/train.py") == 2  # its parent's patch, then its own

        status, err = get_json(base + "/api/studies/nope")
        assert status == 404 and err["error"]["code"] == "not-found" and err["error"]["hint"]
        status, err = get_json(base + "/api/studies/alpha/trials/999/patch")
        assert status == 404 and err["error"]["code"] == "not-found"

        status, _, page = http(base + "/studies/alpha")
        assert status == 200 and b"<script>" in page and b"src=" not in page


def test_a_journal_change_shows_in_the_next_read(studies: Path) -> None:
    with serving(studies / "b") as base:
        before = get_json(base + "/api/studies/beta")[1]
        write_journal(studies / "b", 13, name="beta", stopped=True)
        after = get_json(base + "/api/studies/beta")[1]
        assert len(after["trials"]) == len(before["trials"]) + 1
        assert after["version"] != before["version"] and after["state"] == "finished"


def test_a_foreign_host_header_is_refused_on_loopback(studies: Path) -> None:
    with serving(studies) as base:
        status, _, body = http(base + "/api/studies", headers={"Host": "evil.example:80"})
        assert status == 421 and b"Host not allowed" in body


def test_beyond_loopback_the_server_needs_a_token(studies: Path, monkeypatch) -> None:
    monkeypatch.delenv("AIR_MCP_TOKEN", raising=False)
    cmd = [sys.executable, "-m", "autoresearch.cli", "serve", str(studies), "--host", "0.0.0.0"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "[invalid-input]" in done.stderr and "AIR_MCP_TOKEN" in done.stderr

    with serving(studies, host="0.0.0.0", env={"AIR_MCP_TOKEN": "s3cret-token"}) as base:
        assert http(base + "/api/studies", auth=False)[0] == 401
        assert http(base + "/api/studies", headers={"Authorization": "Bearer wrong"})[0] == 401
        ok = {"Authorization": "Bearer s3cret-token"}
        assert get_json(base + "/api/studies", headers=ok)[0] == 200
        status, headers, _ = http(base + "/studies/alpha?token=s3cret-token", auth=False)
        assert status == 200 and "HttpOnly" in headers["set-cookie"]
        cookie = headers["set-cookie"].split(";")[0]
        assert http(base + "/api/studies/alpha", headers={"Cookie": cookie})[0] == 200


def test_stop_needs_the_token_and_stops_the_study(studies: Path, study_home: Path) -> None:
    url = "/api/studies/beta/stop"
    with serving(studies) as base:  # no owner's token: stopping is off
        status, err = get_json_post(base + url)
        assert status == 403 and err["error"]["code"] == "invalid-state"
    with serving(studies, env={"AIR_MCP_TOKEN": "tok"}) as base:
        assert get_json_post(base + url, auth=False)[0] == 401
        status, body = get_json_post(base + url, {"Authorization": "Bearer tok"})
        assert status == 200 and body["state"] == "finished"
        assert body["stop_reason"] == "stop-request"
        assert get_json(base + "/api/studies/beta")[1]["stop_reason"] == "stop-request"


def test_on_loopback_every_request_needs_the_printed_token(studies: Path) -> None:
    """Issue 37.9: a sandboxed job shares loopback and the user's uid: the page answers
    nothing without its token, made per server and printed only in its URL."""
    with serving(studies) as base:
        paths = ["/", "/studies/alpha", "/api/studies", "/api/studies/alpha"]
        paths += ["/api/studies/alpha/events", "/api/studies/alpha/trials/13/patch"]
        for path in paths:
            status, _, body = http(base + path, auth=False)
            assert status == 401 and b"alpha" not in body, path
        wrong = {"Authorization": "Bearer not-the-token"}
        assert http(base + "/api/studies", headers=wrong)[0] == 401
        status, headers, _ = http(with_token(base + "/studies/alpha"), auth=False)
        port = base.rsplit(":", 1)[1]
        assert status == 200 and headers["set-cookie"].startswith(f"air_token_{port}=")
        assert "HttpOnly" in headers["set-cookie"] and "SameSite=Strict" in headers["set-cookie"]
        cookie = headers["set-cookie"].split(";")[0]
        assert http(base + "/api/studies/alpha", headers={"Cookie": cookie})[0] == 200
        # another page's cookie (another port) is not this one's
        other = {"Cookie": f"air_token_1={TOKENS[base]}"}
        assert http(base + "/api/studies", headers=other)[0] == 401


def test_the_page_listens_on_loopback_only(studies: Path) -> None:
    """Issue 37.14: every service the suite starts binds loopback only."""
    from listening import beyond_loopback, listening, process_tree

    with serving(studies) as base:
        tree = process_tree(PIDS[base])
        assert [p for _, p, _, _ in listening(tree)] == [int(base.rsplit(":", 1)[1])]
        assert not beyond_loopback(tree)


def test_a_state_change_from_another_origin_is_refused_even_with_the_cookie(
    studies: Path, study_home: Path
) -> None:
    """Issue 37.8: a page on another 127.0.0.1 port is same-site: the browser sends the cookie
    with its POST, so only Origin / Sec-Fetch-Site tell it from the page itself."""
    url = "/api/studies/beta/stop"
    with serving(studies, env={"AIR_MCP_TOKEN": "tok"}) as base:
        _, headers, _ = http(with_token(base + "/studies/beta"), auth=False)
        cookie = {"Cookie": headers["set-cookie"].split(";")[0]}
        evil = f"http://127.0.0.1:{free_port()}"
        for extra in (
            {"Origin": evil},  # what Chromium sends from another port
            {"Origin": evil, "Sec-Fetch-Site": "same-site"},
            {"Sec-Fetch-Site": "same-site"},
            {"Origin": "null"},  # a sandboxed iframe or a file:// page
            {},  # a cookie with neither: no browser sends a POST so
        ):
            status, err = get_json_post(base + url, {**cookie, **extra})
            assert status == 403 and err["error"]["code"] == "forbidden", extra
        # even the owner's bearer is refused from another origin (a page cannot set it, but a
        # state change from there is never wanted)
        status, _ = get_json_post(base + url, {"Authorization": "Bearer tok", "Origin": evil})
        assert status == 403
        assert get_json(base + "/api/studies/beta")[1]["state"] == "interrupted"  # not stopped
        own = {**cookie, "Origin": base, "Sec-Fetch-Site": "same-origin"}
        status, body = get_json_post(base + url, own)  # the page's own button
        assert status == 200 and body["state"] == "finished"


def get_json_post(url: str, headers: dict[str, str] | None = None, auth: bool = True):
    status, _, body = http(url, method="POST", headers=headers, auth=auth)
    return status, json.loads(body)


def test_report_html_is_one_file_with_the_data_inlined(studies: Path) -> None:
    folder = studies / "a"
    cmd = [sys.executable, "-m", "autoresearch.cli", "report", str(folder), "--html", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    paths = json.loads(done.stdout)
    page = Path(paths["html"]).read_text()
    assert Path(paths["html"]) == folder / "report.html"
    assert '"mode":"file"' in page and '"name":"alpha"' in page
    assert "src=" not in page and "<link" not in page and "http://" not in page.split("AIR=")[0]
    assert "+lr = " in page  # code trials' patches travel in the file
    report = Path(paths["report"]).read_text()
    assert "**Cost:** $" in report and "per kept improvement" in report


def _next_event(stream) -> tuple[str, dict]:
    """The next named event of a server-sent event stream: (name, its JSON data)."""
    name = ""
    for raw in stream:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: ") and name:
            return name, json.loads(line[6:])
    raise AssertionError("the event stream ended")


def test_the_event_stream_sends_the_view_when_the_journal_changes(studies: Path) -> None:
    import time
    import urllib.request

    with serving(studies) as base:
        version = get_json(base + "/api/studies/alpha")[1]["version"]
        url = with_token(f"{base}/api/studies/alpha/events?version={version}")
        with urllib.request.urlopen(url, timeout=30) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            with open(studies / "a" / "journal.jsonl", "a") as f:  # nothing sent before this
                line = {"event": "warning", "ts": time.time(), "message": "from the journal"}
                f.write(json.dumps(line) + "\n")
            name, view = _next_event(stream)
        assert name == "view" and view["version"] != version
        assert "from the journal" in view["warnings"]
        assert view == get_json(base + "/api/studies/alpha")[1]  # the API's view, as sent
        assert http(base + "/api/studies/nope/events")[0] == 404


def test_a_big_study_s_page_inlines_its_first_screen_and_its_stream_the_rest(
    tmp_path: Path,
) -> None:
    import gzip
    import re
    import urllib.request

    write_journal(tmp_path / "studies" / "big", 300, name="big")
    with serving(tmp_path / "studies") as base:
        status, _, html = http(base + "/studies/big")
        block = re.search(rb"<script id=air-initial type=application/json>(.*?)</script>", html)
        assert status == 200 and block is not None
        first = json.loads(block.group(1))
        status, headers, raw = http(base + "/api/studies/big")
        whole = json.loads(raw)
        assert first["version"] == "first-" + whole["version"]  # not the whole view's
        assert [t["n"] for t in first["trials"]] == list(range(40))  # the rows at the top
        assert first["trials"] == whole["trials"][:40] and first["trials_total"] == 300
        assert [p[0] for p in first["points"]] == list(range(300))  # the chart: every trial
        kinds = {p[2] for p in first["points"]}
        assert {"b", "k", "o"} <= kinds and "ox" in kinds  # baseline, kept, other; failed
        assert first["counts"] == whole["counts"] and "lineage" not in first  # below the fold
        best = whole["best_so_far"]  # the chart's step line: where the best changes
        assert first["best_so_far"] == [
            p for i, p in enumerate(best) if not i or p[1] != best[i - 1][1]
        ]
        assert len(first["best_so_far"]) < len(best) / 10
        # 300 trials; 1,000: ~70 KB of ~600 KB (2.95: the throughput card, issue 41.7, +150 B)
        assert len(html) < len(raw) / 2.95
        # the page's event stream, asked from the first screen's version, sends the whole view
        url = with_token(f"{base}/api/studies/big/events?version={first['version']}")
        with urllib.request.urlopen(url, timeout=30) as stream:
            name, view = _next_event(stream)
        assert name == "view" and view == whole

        # gzip for a client that takes it, the same bytes unzipped; none for one that does not
        got = http(base + "/api/studies/big", headers={"Accept-Encoding": "gzip, br"})
        assert got[0] == 200 and got[1]["content-encoding"] == "gzip"
        assert gzip.decompress(got[2]) == raw and len(got[2]) < len(raw) / 3
        assert "content-encoding" not in {k.lower() for k in headers}
        refused = http(base + "/api/studies/big", headers={"Accept-Encoding": "gzip;q=0"})
        assert refused[2] == raw
        page = http(base + "/studies/big", headers={"Accept-Encoding": "gzip"})
        assert page[1]["content-encoding"] == "gzip" and gzip.decompress(page[2]) == html


def test_the_demo_page_serves_from_a_thread_and_moves_to_a_free_port(studies: Path) -> None:
    from autoresearch.web.serve import BackgroundPage

    first = BackgroundPage([studies / "a"], port=free_port())
    taken = int(first.base.rsplit(":", 1)[1].strip("/"))
    second = BackgroundPage([studies / "b"], port=taken)  # its port is taken: the next one
    try:
        assert second.base != first.base and second.token != first.token
        assert http(first.base + "api/studies")[0] == 401  # its token, on loopback too
        status, body = get_json(first.url("api/studies"))
        assert status == 200 and [s["name"] for s in body["studies"]] == ["alpha"]
        assert get_json(second.url("api/studies"))[1]["studies"][0]["name"] == "beta"
    finally:
        first.stop()
        second.stop()
    with pytest.raises(OSError):
        http(first.url("api/studies"))


def test_status_prints_the_cost(studies: Path) -> None:
    cmd = [sys.executable, "-m", "autoresearch.cli", "status", str(studies / "a")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("cost"))
    assert "GPU $" in line and "LLM $" in line and "per kept improvement" in line


def test_a_running_study_shows_its_gpus_and_live_curves(study_home: Path, tmp_path: Path) -> None:
    import signal

    import yaml

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ar_helpers import small_study, start_loop
    from helpers import wait_until

    study = small_study(
        name="gpu-live",
        base_config={"steps": 40, "sleep_s": 0.5, "log": "mlflow"},  # 20 s: time to see it
        budget={"trials": 2, "concurrency": 1},
        gpus_per_trial=1,
    )
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(study))
    loop = start_loop(tmp_path / "s.yaml", tmp_path / "studies" / "gpu-live")
    try:
        with serving(tmp_path / "studies") as base:

            def live() -> dict | None:
                status, view = get_json(base + "/api/studies/gpu-live")
                if status != 200 or not view["running"] or not view["gpus"]:
                    return None
                return view if len(view["running"][0]["curve"]) >= 2 else None

            view = wait_until(live, timeout_s=120, every_s=0.5)
            job = view["running"][0]["job_id"]
            assert view["gpus"][0]["jobs"] == [job]  # the simulated GPU it holds
            assert view["gpus"][0]["name"] == "Simulated GPU"
            steps = [p[0] for p in view["running"][0]["curve"]]
            assert steps == sorted(steps)  # read from MLflow while it runs
    finally:
        if loop.poll() is None:
            loop.send_signal(signal.SIGTERM)
        loop.wait(timeout=60)


def test_with_no_folder_named_it_serves_the_registered_studies(
    tmp_path: Path, air_home: Path
) -> None:
    from autoresearch.study.registry import register

    first = write_journal(tmp_path / "anywhere" / "one", 5, name="reg-one")
    register("reg-one", first)
    with serving() as base:  # no folder: ./studies, AIR_HOME/studies and the registry
        names = {s["name"] for s in get_json(base + "/api/studies")[1]["studies"]}
        assert "reg-one" in names
        later = write_journal(tmp_path / "elsewhere" / "two", 5, name="reg-two")
        register("reg-two", later)  # started after the server: found on the next request
        names = {s["name"] for s in get_json(base + "/api/studies")[1]["studies"]}
        assert {"reg-one", "reg-two"} <= names


def test_the_token_air_mcp_wrote_in_air_home_serves_too(
    studies: Path, air_home: Path, monkeypatch
) -> None:
    monkeypatch.delenv("AIR_MCP_TOKEN", raising=False)
    air_home.mkdir(parents=True, exist_ok=True)
    token_file = air_home / "mcp-token"
    token_file.write_text("from-the-file\n")
    token_file.chmod(0o644)  # others could read it: not used, so no token at all
    cmd = [sys.executable, "-m", "autoresearch.cli", "serve", str(studies), "--host", "0.0.0.0"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "without a token" in done.stderr
    token_file.chmod(0o600)
    with serving(studies, host="0.0.0.0") as base:
        assert http(base + "/api/studies", auth=False)[0] == 401
        ok = {"Authorization": "Bearer from-the-file"}
        assert get_json(base + "/api/studies", headers=ok)[0] == 200
