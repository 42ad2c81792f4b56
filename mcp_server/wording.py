"""How ``air-mcp`` words what the core says: tool names for `air` commands, errors for agents.

The core speaks CLI (``air logs job-x``); an agent on MCP calls tools (``get_logs``). Every
tool error is rendered by ``air_skills.errors.render_text`` (the one renderer) with this
wording and a size bound: ``[code] what happened`` then ``Next: ...``.
"""

from __future__ import annotations

import re

from pydantic import ValidationError

from air_skills.errors import AirError, InvalidInput, NotFound, pydantic_problems, render_text

MAX_ERROR_CHARS = 2_000

_CLI_TO_TOOL = {
    "logs": "get_logs",
    "status": "get_job",
    "cancel": "cancel_job",
    "metrics": "get_metrics",
    "wait": "wait_for_jobs",
    "ls": "list_jobs",
    "gpus": "list_gpus",
    "compare": "compare_jobs",
}
_CLI_REF = re.compile(
    r"`air (logs|status|cancel|metrics|wait|ls|gpus|compare)( job-[0-9a-f]+)?[^`]*`"
)


def mcp_wording(text: str) -> str:
    """Name the MCP tool where the core names an `air` command (`air logs job-x` -> get_logs)."""

    def swap(m: re.Match[str]) -> str:
        tool = _CLI_TO_TOOL[m.group(1)]
        return f"{tool}(job_id={m.group(2).strip()})" if m.group(2) else tool

    return _CLI_REF.sub(swap, text) if "`air " in text else text


def error_text(exc: AirError) -> str:
    """``[code] what happened`` then ``Next: what to call or change``, bounded in size."""
    return render_text(exc, max_chars=MAX_ERROR_CHARS, wording=mcp_wording)


def bad_arguments(tool: str, exc: ValidationError, valid: list[str]) -> InvalidInput:
    """InvalidInput listing every bad argument at once (names shortened, values never shown);
    unknown ones with a did-you-mean (from ``pydantic_problems``)."""
    problems = [_argv_as_list(p) for p in pydantic_problems(exc, valid)]
    problems = [p if len(p) <= 200 else p[:200] + " ..." for p in problems]
    shown = problems[:10] + ([f"... and {len(problems) - 10} more"] if len(problems) > 10 else [])
    return InvalidInput(
        f"bad arguments for {tool}: " + "; ".join(shown),
        hint=f"fix the arguments listed; {tool} takes: " + (", ".join(valid) or "no arguments"),
        problems=shown,
    )


def _argv_as_list(problem: str) -> str:
    """A command given as one string: say to give argv as a list. Over MCP a string is refused,
    not split as the CLI splits it: the schema says argv, and quoting is the caller's to get
    right, not ours to guess."""
    if problem == "command: Input should be a valid list":
        return problem + ': give argv as a list, e.g. ["python", "train.py", "--lr", "3e-4"]'
    return problem


def job_not_found(exc: NotFound) -> NotFound:
    """The same error, with the hint an agent needs: where job ids come from."""
    exc.hint = "call list_jobs to see the job ids (they look like job-0123456789)"
    return exc
