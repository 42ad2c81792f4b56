"""What an agent reads: errors as `[code] ... / Next: ...` through the one renderer, tool names."""

from __future__ import annotations

from air_skills.errors import AirError, InvalidInput, NotFound
from mcp_server.wording import error_text, mcp_wording


def test_error_text_is_code_then_next() -> None:
    text = error_text(NotFound("no job 'x'", hint="call list_jobs"))
    assert text == "[not-found] no job 'x'\nNext: call list_jobs"
    # no hint: still a Next line
    assert error_text(AirError("boom")).splitlines()[1].startswith("Next: ")
    # bounded: a huge message cannot make a huge reply
    assert len(error_text(InvalidInput("x" * 10_000_000, hint="h"))) < 5_000


def test_cli_wording_becomes_tool_names() -> None:
    text = "read `air logs job-0123456789abc`, then `air ls`; `air doctor` stays"
    out = mcp_wording(text)
    assert "get_logs(job_id=job-0123456789abc)" in out
    assert "list_jobs" in out and "`air doctor`" in out


def test_errors_speak_tools_in_message_and_hint() -> None:
    exc = AirError("job ended: see `air logs job-0123456789`", hint="run `air ls --all`")
    text = error_text(exc)
    assert text == (
        "[air-error] job ended: see get_logs(job_id=job-0123456789)\nNext: run list_jobs"
    )
