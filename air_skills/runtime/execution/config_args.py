"""A job's config as command-line flags (``config_as: args | both``), for scripts that take flags.

Stdlib only. ``--key=value`` per scalar key; a boolean as ``--key`` when true and nothing when
false (argparse's ``store_true``, click's ``is_flag``); a list as ``--key v1 v2`` (``nargs``).
The flags come after the command's own arguments. The file (AIR_CONFIG_FILE) is written either
way; ``file`` alone adds no flags.
"""

from __future__ import annotations

import json
import re
from typing import Any

CONFIG_AS = ("file", "args", "both")
DEFAULT = "both"
# What a script that takes no such flag prints: argparse, click/typer, and absl.
_REJECTED = (
    re.compile(r"unrecognized arguments?: (?P<flag>--?[\w.-]+)"),
    re.compile(r"No such option:? '?(?P<flag>--?[\w.-]+)"),
    re.compile(r"Got unexpected extra arguments? \((?P<flag>[^)\s]+)"),
    re.compile(r"Unknown command line flag '(?P<flag>[\w.-]+)'"),
)


def _word(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)  # 1.0 stays "1.0": a float for a script that checks types
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def config_flags(config: dict[str, Any]) -> list[str]:
    """The flags that hand ``config`` to a script, in the config's key order."""
    flags: list[str] = []
    for key, value in config.items():
        if value is None or value is False:
            continue  # nothing: the script's own default (store_true's False)
        if value is True:
            flags.append(f"--{key}")
        elif isinstance(value, list):
            if value:  # an empty list: nothing, as for a false flag
                flags += [f"--{key}", *(_word(v) for v in value)]
        else:
            flags.append(f"--{key}={_word(value)}")
    return flags


def job_argv(spec: dict[str, Any]) -> list[str]:
    """The job's command with its config's flags appended when ``config_as`` asks for them."""
    argv = list(spec["command"])
    if (spec.get("config_as") or DEFAULT) in ("args", "both"):
        argv += config_flags(spec.get("config") or {})
    return argv


def rejected_flag(log_tail: str) -> str | None:
    """The flag a script refused, from the end of its output (None: no such complaint)."""
    for pattern in _REJECTED:
        found = pattern.search(log_tail)
        if found:
            return found.group("flag").strip("'\"")
    return None


def refused(spec: dict[str, Any], log_path: str) -> str | None:
    """The config flag a failed job's command refused (exit 2, argparse's and click's usage
    error), from the end of its log; None when no flag was appended or none was refused."""
    if (spec.get("config_as") or DEFAULT) == "file" or not spec.get("config"):
        return None
    from air_skills.runtime.execution.gang import attempt_output
    from air_skills.runtime.results.summary_block import read_tail

    flag = rejected_flag(attempt_output(read_tail(log_path, 16 * 1024))[-4096:])
    appended = config_flags(spec.get("config") or {})
    # only a flag air appended: the command's own arguments are the user's to get right
    return flag if flag and any(a.split("=")[0] == flag for a in appended) else None
