"""Every AIR_* environment variable, parsed and validated once (stdlib only).

Reads happen when a value is needed, not at import: tests set variables per test, and the
supervisor reads them in its own process. ``get`` parses one variable; ``check_all`` raises one
``InvalidInput`` naming every bad value (the CLI calls it before each command), so
``AIR_MAX_INFRA_RETRIES=three air ls`` is a clean ``[invalid-input]`` error, not a traceback.
``docs/configuration.md`` is the table (air_skills/settings_table.py) in prose;
``python -m air_skills.settings`` prints it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from air_skills import settings_page
from air_skills.errors import InvalidInput
from air_skills.settings_table import JOB_ENV, TABLE, Setting

SETTINGS: dict[str, Setting] = {s.name: s for s in TABLE}

_PARSE: dict[str, Callable[[str], Any]] = {
    "int": int,
    "float": float,
    "str": str,
    "path": lambda raw: Path(raw).expanduser(),
}


def raw(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The variable's text, stripped; "" when unset. ``environ``: another environment than
    this process's (a job's, as it was launched)."""
    _setting(name)
    return (os.environ if environ is None else environ).get(name, "").strip()


def problem(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """``NAME='value' is not FORM`` when the variable is set to a bad value, else None."""
    text = raw(name, environ)
    if not text:
        return None
    try:
        _parse(SETTINGS[name], text)
    except ValueError:
        return f"{name}={text!r} is not {SETTINGS[name].form}"
    return None


def get(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The parsed value, or the default when unset or empty (``environ``: as for ``raw``).

    A bad value raises ``InvalidInput`` naming the variable, the value and its valid form; for a
    lenient setting it gives the default (its user reports the problem through ``problem``).
    """
    s = _setting(name)
    text = raw(name, environ)
    if not text:
        return s.default
    try:
        return _parse(s, text)
    except ValueError:
        if not s.strict:
            return s.default
        raise _invalid(s, text) from None


def check_all() -> None:
    """Raise one ``InvalidInput`` for every strict variable set to a bad value."""
    bad = [(s, text) for s in TABLE if s.strict and (text := raw(s.name)) and problem(s.name)]
    if not bad:
        return
    if len(bad) == 1:
        raise _invalid(*bad[0])
    problems = [f"{s.name}={text!r} is not {s.form}" for s, text in bad]
    raise InvalidInput(
        "bad environment variables: " + "; ".join(problems),
        hint="fix or unset them (docs/configuration.md lists every variable)",
        variables=[s.name for s, _ in bad],
    )


def _setting(name: str) -> Setting:
    try:
        return SETTINGS[name]
    except KeyError:
        # A programming error, not a user's: every variable the code reads is in the table.
        raise KeyError(f"{name} is not in air_skills.settings; add it to the table") from None


def _parse(s: Setting, text: str) -> Any:
    value = _PARSE[s.kind](text)
    if s.valid is not None and not s.valid(value):
        raise ValueError(text)
    return value


def _invalid(s: Setting, text: str) -> InvalidInput:
    return InvalidInput(
        f"{s.name}={text!r} is not {s.form}",
        hint=f"set {s.name} to {s.form}, or unset it (default: {settings_page.default_text(s)})",
        variable=s.name,
        value=text,
    )


def markdown_page() -> str:
    """docs/configuration.md, whole (air_skills/settings_page.py writes it from the table)."""
    return settings_page.markdown_page(TABLE, JOB_ENV)


if __name__ == "__main__":
    print(markdown_page(), end="")
