"""The journal read incrementally (``journal.tail``, the study page's reader) gives the state a
whole read gives, after appends, a torn last line, a replaced file, a truncated one, and one
rewritten in place; and reads the file whole only in those cases."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ar_helpers import small_study

from autoresearch.journal.journal import Journal, StudyState, replay
from autoresearch.journal.tail import JournalTail
from autoresearch.study.study import parse_study

STUDY = parse_study(small_study(name="tail", budget={"trials": 50, "concurrency": 2}))


def whole(folder: Path) -> StudyState:
    """The state as ``report.load_state`` makes it: the journal read whole and replayed."""
    journal = Journal(folder)
    state = replay(journal.read())
    state.warnings += journal.notes(state)
    return state


def facts(state: StudyState) -> dict[str, Any]:
    """What a reader sees of a state (its trials in full)."""
    keys = ("study", "best_trial", "best_value", "llm_usd", "llm_calls", "events", "warnings",
            "skipped", "noise_floor", "stopped", "sessions", "wall_s")  # fmt: skip
    return {
        "trials": {n: t.to_dict() for n, t in state.trials.items()},
        **{k: getattr(state, k) for k in keys},
    }


def trial(j: Journal, n: int, value: float, usd: float = 0.01) -> None:
    """One trial's life as the loop writes it: an LLM round, proposal, launch, end, decision."""
    j.append("llm_call", usd=usd, input_tokens=10, output_tokens=5, ok=True)
    j.append("proposal", trial=n, source="llm", diff={"x": value}, config={"x": value})
    j.append("launched", trial=n, job_id=f"job-{n}", attempt=1, gpus=1)
    j.append("job_started", trial=n, started_at=1.0)
    j.append("finished", trial=n, status="SUCCEEDED", value=value, metrics={"loss": value})
    j.append("decision", trial=n, decision="keep", value=value, best_value=value)


def started(folder: Path, trials: int = 3) -> Journal:
    folder.mkdir(exist_ok=True)
    j = Journal(folder)
    j.append("session_started", study=STUDY.to_dict(), study_id="s1", gpus_per_trial=1)
    for n in range(trials):
        trial(j, n, 1.0 - n / 10)
    return j


def same_as_whole(tail: JournalTail, folder: Path) -> StudyState:
    state = tail.read()
    assert facts(state) == facts(whole(folder))
    return state


def test_appended_lines_are_read_alone_and_earlier_states_stay_as_they_were(
    tmp_path: Path,
) -> None:
    j = started(tmp_path / "s")
    j.append("proposal", trial=3, source="llm", diff={"x": 0.4}, config={"x": 0.4})
    j.append("launched", trial=3, job_id="job-3", attempt=1, gpus=1)
    tail = JournalTail(tmp_path / "s")
    first = same_as_whole(tail, tmp_path / "s")
    before = facts(first)
    assert tail.read() is first  # nothing new: the same state, nothing read
    j.append("finished", trial=3, status="SUCCEEDED", value=0.4, metrics={"loss": 0.4})
    assert same_as_whole(tail, tmp_path / "s").trials[3].status.value == "SUCCEEDED"
    for n in range(4, 8):
        trial(j, n, 0.5 - n / 100)
        j.append("warning", message=f"line {n}")
        same_as_whole(tail, tmp_path / "s")
    # a proposal in an LLM round shares the round's dollars with its trials: a fork's change
    j.append("llm_call", usd=0.3, ok=True)
    j.append("proposal", trial=8, source="llm", diff={"x": 0.1}, config={"x": 0.1})
    j.append("proposal", trial=9, source="llm", diff={"x": 0.2}, config={"x": 0.2})
    last = same_as_whole(tail, tmp_path / "s")
    assert last.trials[8].llm_usd == last.trials[9].llm_usd == 0.15
    assert tail.full_reads == 1  # the first read only
    assert facts(first) == before  # a state handed out is never changed by later reads
    assert first.trials[3].status.value == "RUNNING"


def test_lines_that_do_not_apply_are_noted_as_a_whole_read_notes_them(tmp_path: Path) -> None:
    j = started(tmp_path / "s")
    tail = JournalTail(tmp_path / "s")
    same_as_whole(tail, tmp_path / "s")
    with open(j.path, "ab") as f:
        f.write(b'\xff\xfe not text\n[1, 2]\n{"event": "finished", "trial": 77, "status": "X"}\n')
    j.append("decision", trial=1, decision="keep", value=0.2, best_value=0.2)
    state = same_as_whole(tail, tmp_path / "s")
    assert any("not UTF-8" in w for w in state.warnings)
    assert any("not valid study events" in w for w in state.warnings)
    trial(j, 20, 0.05)
    same_as_whole(tail, tmp_path / "s")
    assert tail.full_reads == 1


def test_a_torn_last_line_is_read_whole_and_left_out_until_a_line_ends_it(
    tmp_path: Path,
) -> None:
    j = started(tmp_path / "s")
    tail = JournalTail(tmp_path / "s")
    same_as_whole(tail, tmp_path / "s")
    with open(j.path, "ab") as f:  # a kill -9 in the middle of a write
        f.write(b'{"event": "finished", "trial": 2, "status": "FAI')
    state = same_as_whole(tail, tmp_path / "s")
    assert state.trials[2].status.value == "SUCCEEDED"
    assert tail.full_reads == 2
    j.append("warning", message="the loop again")  # starts on a line of its own
    state = same_as_whole(tail, tmp_path / "s")
    assert state.warnings[-1] == "the loop again"
    assert tail.full_reads == 3  # the last read ended inside a line: whole once more
    trial(j, 3, 0.01)
    same_as_whole(tail, tmp_path / "s")
    assert tail.full_reads == 3  # whole lines again: back to reading what was appended


def test_a_line_seen_half_written_is_read_once_it_is_whole(tmp_path: Path) -> None:
    j = started(tmp_path / "s")
    tail = JournalTail(tmp_path / "s")
    same_as_whole(tail, tmp_path / "s")
    line = b'{"event": "warning", "ts": 5.0, "message": "late"}\n'
    with open(j.path, "ab") as f:
        f.write(line[:20])
        f.flush()
        same_as_whole(tail, tmp_path / "s")
        f.write(line[20:])
    assert same_as_whole(tail, tmp_path / "s").warnings[-1] == "late"


def test_a_replaced_journal_is_read_whole(tmp_path: Path) -> None:
    started(tmp_path / "s", trials=2)
    tail = JournalTail(tmp_path / "s")
    same_as_whole(tail, tmp_path / "s")
    started(tmp_path / "other", trials=6)  # longer: its size alone would pass for an append
    os.replace(tmp_path / "other" / "journal.jsonl", tmp_path / "s" / "journal.jsonl")
    state = same_as_whole(tail, tmp_path / "s")
    assert len(state.trials) == 6 and tail.full_reads == 2


def test_a_truncated_journal_is_read_whole(tmp_path: Path) -> None:
    j = started(tmp_path / "s", trials=5)
    tail = JournalTail(tmp_path / "s")
    same_as_whole(tail, tmp_path / "s")
    lines = j.path.read_bytes().splitlines(keepends=True)
    with open(j.path, "r+b") as f:  # the same file, cut after trial 1
        f.truncate(sum(len(x) for x in lines[:13]))
    state = same_as_whole(tail, tmp_path / "s")
    assert sorted(state.trials) == [0, 1] and tail.full_reads == 2
    trial(j, 2, 0.3)  # and appends after it are read alone again
    same_as_whole(tail, tmp_path / "s")
    assert tail.full_reads == 2


def test_a_journal_rewritten_in_place_is_read_whole(tmp_path: Path) -> None:
    j = started(tmp_path / "s", trials=2)
    tail = JournalTail(tmp_path / "s")
    same_as_whole(tail, tmp_path / "s")
    inode = j.path.stat().st_ino
    data = j.path.read_bytes()
    # the same inode, longer, and different before the old end: not an append
    j.path.write_bytes(data.replace(b'"value":0.9', b'"value":0.7') + data[-200:])
    assert j.path.stat().st_ino == inode
    state = same_as_whole(tail, tmp_path / "s")
    assert state.trials[1].value == 0.7 and tail.full_reads == 2


def test_a_journal_that_goes_away_and_comes_back(tmp_path: Path) -> None:
    started(tmp_path / "s", trials=2)
    tail = JournalTail(tmp_path / "s")
    same_as_whole(tail, tmp_path / "s")
    (tmp_path / "s" / "journal.jsonl").unlink()
    assert tail.read().trials == {}
    started(tmp_path / "s", trials=1)
    assert len(same_as_whole(tail, tmp_path / "s").trials) == 1
