"""Study files, journals and job output that a hostile or careless hand wrote: each is a clean
error or printed as it is, never a hang, a memory blow-up or a crash."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from ar_helpers import small_study

from air_skills.errors import InvalidSpec, InvalidState
from autoresearch.api import get_study, start_study
from autoresearch.journal.journal import Journal, TrialStatus, replay
from autoresearch.spec.safe_read import MAX_STUDY_BYTES
from autoresearch.study.study import dump_study, load_study, parse_study

# 500 bytes that expand to 9**9 strings when a loader follows the aliases.
ALIAS_BOMB = "\n".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(
            f"{b}: &{b} [*{a},*{a},*{a},*{a},*{a},*{a},*{a},*{a},*{a}]"
            for a, b in zip("abcdefgh", "bcdefghi", strict=True)
        ),
        "name: bomb",
        "command: [python, t.py]",
        "base_config: *i",
        "search_space: {x: {type: float, low: 0, high: 1}}",
        "objective: {metric: loss}",
    ]
)


def _limit_memory() -> None:
    """The child may use 2 GiB: a reader that expands the bomb dies instead of the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _cli_run(path: str, *args: str, timeout_s: float = 90) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "autoresearch.cli", "run", path, *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout_s, preexec_fn=_limit_memory
    )


@pytest.mark.parametrize("kind", ["alias-bomb", "fifo", "dev-zero"])
def test_cli_refuses_a_hostile_study_file_at_once(tmp_path: Path, kind: str) -> None:
    if kind == "alias-bomb":
        path = tmp_path / "bomb.yaml"
        path.write_text(ALIAS_BOMB)
        expected = "anchors and aliases"
    elif kind == "fifo":
        path = tmp_path / "study.yaml"
        os.mkfifo(path)  # nobody ever writes to it: opening it to read would wait forever
        expected = "is not a regular file (it is a FIFO)"
    else:
        path = Path("/dev/zero")
        expected = "is not a regular file (it is a device)"
    res = _cli_run(str(path), "--dir", str(tmp_path / "study"), "--json", timeout_s=60)
    assert res.returncode == 2, res.stderr[-2000:]
    error = json.loads(res.stdout)["error"]
    assert error["code"] == "invalid-spec" and expected in error["message"]


def test_start_study_refuses_an_alias_bomb_with_a_clean_error(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB)
    with pytest.raises(InvalidSpec) as info:
        start_study(str(path), tmp_path / "study")
    assert "anchors and aliases" in info.value.message
    assert "line 1, column 4" in info.value.problems[0]  # the first anchor
    assert "anchors" in (info.value.hint or "")
    assert not (tmp_path / "study").exists()


def test_a_study_file_over_the_size_cap_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(small_study()) + "#" * MAX_STUDY_BYTES)
    with pytest.raises(InvalidSpec) as info:
        load_study(path)
    assert f"larger than {MAX_STUDY_BYTES:,} bytes" in info.value.message


def test_a_study_file_that_is_not_utf8_is_a_clean_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(yaml.safe_dump(small_study()).encode() + b"# caf\xe9 (Latin-1)\n")
    with pytest.raises(InvalidSpec) as info:
        load_study(path)
    assert "not UTF-8" in info.value.message


def test_a_written_study_reads_back_even_when_it_repeats_a_value(tmp_path: Path) -> None:
    data = small_study()
    data["search_space"]["y"] = data["search_space"]["x"]  # one object, twice: no alias
    path = tmp_path / "study.yaml"
    path.write_text(dump_study(parse_study(data)))
    assert load_study(path).search_space["y"] == load_study(path).search_space["x"]


def _journal_with(folder: Path, *lines: bytes) -> None:
    study = parse_study(small_study(name="bytes")).to_dict()
    folder.mkdir()
    Journal(folder).append("session_started", study=study, study_id="s1", gpus_per_trial=0)
    Journal(folder).append("proposal", trial=0, source="baseline", diff={}, config={})
    with open(folder / "journal.jsonl", "ab") as f:
        f.write(b"".join(lines))


def test_get_study_skips_journal_lines_that_are_not_utf8_and_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "study"
    _journal_with(
        folder,
        b'{"event":"warning","ts":1,"message":"caf\xe9"}\n',  # Latin-1 bytes
        b"\xff\xfe\x00garbage\n",
        b'[1, 2]\n{"no_event": 1}\n',  # JSON, but not events
    )
    Journal(folder).append("launched", trial=0, job_id="job-0", attempt=1, gpus=0)
    summary = get_study(folder)
    assert summary["name"] == "bytes" and summary["trials"]["running"] == 1
    assert any("2 line(s)" in w and "not UTF-8" in w for w in summary["warnings"])
    assert replay(Journal(folder).read()).trials[0].status == TrialStatus.RUNNING


def test_get_study_on_a_journal_that_is_a_fifo_is_a_clean_error(tmp_path: Path) -> None:
    folder = tmp_path / "study"
    folder.mkdir()
    os.mkfifo(folder / "journal.jsonl")
    outcome: dict[str, Any] = {}

    def read() -> None:
        try:
            get_study(folder)
        except Exception as exc:
            outcome["error"] = exc

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert not reader.is_alive(), "get_study blocked on a FIFO"
    assert isinstance(outcome.get("error"), InvalidState)
    assert "not a regular file (it is a FIFO)" in outcome["error"].message


def test_stop_and_loop_files_that_are_fifos_are_ignored_not_waited_on(tmp_path: Path) -> None:
    from autoresearch.study.folder import LOOP_FILE, STOP_FILE, read_loop_info, take_stop_request

    os.mkfifo(tmp_path / STOP_FILE)
    os.mkfifo(tmp_path / LOOP_FILE)
    seen: dict[str, Any] = {}

    def read() -> None:
        seen["stop"] = take_stop_request(tmp_path)
        seen["loop"] = read_loop_info(tmp_path)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert not reader.is_alive(), "a FIFO in the study folder blocked the reader"
    assert seen == {"stop": None, "loop": None}
    assert not (tmp_path / STOP_FILE).exists()  # dropped: not read again on every poll


def test_a_trial_error_line_with_brackets_prints_as_it_is(study_home: Path, tmp_path: Path) -> None:
    line = "cannot read [/data/shard-0]: [nan] [bold]x"
    data = small_study(
        name="markup",
        base_config={"x": 0.0, "y": 0.0, "steps": 1, "sleep_s": 0.0, "fail": True},
        budget={"trials": 1, "concurrency": 1},
    )
    data["base_config"]["fail_message"] = line
    study_file = tmp_path / "study.yaml"
    study_file.write_text(yaml.safe_dump(data))
    folder = tmp_path / "study"
    res = _cli_run(str(study_file), "--dir", str(folder), "--poll-s", "0.2", timeout_s=180)
    assert res.returncode == 3, res.stderr[-3000:]  # the study failed (its baseline did)
    assert f"RuntimeError: {line}" in res.stderr  # the loop's progress line, verbatim
    st = replay(Journal(folder).read())
    assert st.trials[0].status == TrialStatus.FAILED and line in (st.trials[0].failure or "")
    # The failing trial is the baseline: the study stops there (issue 38: nothing wasted).
    assert st.stopped and st.stopped["reason"] == "baseline-failed"
