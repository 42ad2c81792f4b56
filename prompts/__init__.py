"""Prompt templates for the LLM proposer: plain text files with ``$name`` placeholders."""

from __future__ import annotations

from importlib import resources
from string import Template

NAMES = ("proposer_system", "proposer_user", "proposer_retry", "proposer_code")


def load(template: str) -> Template:
    """The template ``prompts/<template>.txt``, read from the installed package."""
    if template not in NAMES:
        raise KeyError(f"no prompt template {template!r}; there are {', '.join(NAMES)}")
    text = resources.files(__name__).joinpath(f"{template}.txt").read_text(encoding="utf-8")
    return Template(text)


def render(template: str, /, **values: object) -> str:
    return load(template).substitute({k: str(v) for k, v in values.items()})
