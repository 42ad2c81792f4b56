"""The one error renderer: `[code] message`, problems, `Next: hint`; JSON `{"error": ...}`."""

from __future__ import annotations

import json

from air_skills.errors import InvalidSpec, NotFound, TrackingUnavailable, render_json, render_text


def test_text_has_code_message_and_next_step() -> None:
    exc = NotFound("no job 'job-1'", hint="list jobs with `air ls`", job_id="job-1")
    assert render_text(exc) == "[not-found] no job 'job-1'\nNext: list jobs with `air ls`"


def test_a_missing_hint_still_says_what_to_do() -> None:
    assert render_text(TrackingUnavailable("down")).endswith("Next: retry in a few seconds")
    assert render_text(NotFound("gone")).endswith("Next: change the call as the message says")


def test_problems_listed_once_and_bounded_for_mcp() -> None:
    folded = InvalidSpec("bad spec:", problems=["gpus: too many", "lr: not a number"])
    assert render_text(folded).count("gpus: too many") == 1  # already in the message
    listed = InvalidSpec("bad spec", problems=[f"p{i}: " + "x" * 500 for i in range(30)])
    text = render_text(listed, max_chars=100, wording=str.upper)
    lines = text.splitlines()
    assert lines[0] == "[invalid-spec] BAD SPEC"
    assert len(lines) == 12 and all(len(line) <= 204 for line in lines[1:-1])


def test_json_shape() -> None:
    data = json.loads(render_json(NotFound("gone", hint="h", job_id="job-1")))
    assert data == {
        "error": {
            "code": "not-found",
            "message": "gone",
            "hint": "h",
            "retryable": False,
            "context": {"job_id": "job-1"},
        }
    }
