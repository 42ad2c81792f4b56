"""39.10: an internal error names what failed in the call, not a log the agent cannot read."""

from __future__ import annotations

from air_skills.runtime.results.finite import show_value
from mcp_server.server import internal_error


def test_internal_error_names_the_exception_where_and_what_to_try() -> None:
    try:
        show_value(1.0, fmt="?bad")  # a real ValueError raised inside air's own code
    except ValueError as exc:
        error = internal_error("list_jobs", exc, {"metric": "val_mse", "group_by": "seed"})
    text = str(error)
    assert text.startswith("[internal-error] list_jobs failed: ValueError: ")
    assert "(in air_skills.runtime.results.finite.show_value)" in text
    assert "try it without group_by, metric" in text
    assert "stderr" not in text and "log" not in text
