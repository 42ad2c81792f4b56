"""Reading study files that may be hostile: regular files only, size-capped, UTF-8, plain YAML.

A study path may come from an MCP caller: a FIFO must not block the server, ``/dev/zero`` must
not fill its memory, and a 500-byte YAML alias bomb must not expand into gigabytes. So files are
opened without blocking and checked to be regular, read up to a cap, and YAML anchors and
aliases (``&name``, ``*name``, ``<<: *name``) are refused outright: a study file never needs
them, and bounding their expansion is harder to get right than refusing them.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent, NodeEvent

from air_skills.errors import AirError, InvalidSpec, NotFound

MAX_STUDY_BYTES = 1_000_000  # a study file is a page of YAML; this leaves room for comments


class _NoAliasLoader(yaml.SafeLoader):
    """Safe YAML that refuses anchors and aliases, with ``1e-4`` read as a number (YAML 1.1
    wants ``1.0e-4``, a classic trap)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, AliasEvent) or (
            isinstance(event, NodeEvent) and event.anchor is not None
        ):
            raise _AliasRefused(event.start_mark)
        return super().compose_node(parent, index)


_NoAliasLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


class _AliasRefused(yaml.YAMLError):
    def __init__(self, mark: Any) -> None:
        super().__init__("anchors and aliases")
        self.problem_mark = mark
        self.problem = "anchors and aliases (&name, *name, <<: *name) are not allowed"


def read_regular(
    path: Path, what: str, *, max_bytes: int | None, error: type[AirError] = InvalidSpec
) -> bytes:
    """The bytes of ``path`` if it is a regular file (of at most ``max_bytes``); ``what`` names
    it in errors ("study file"). Opening never blocks: a FIFO is refused, not waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NotFound(
            f"no {what} {path}",
            hint="give the path of a study YAML file (see examples/*/study.yaml)",
            path=str(path),
        ) from None
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}", path=str(path)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(
                f"{what} {path} is not a regular file (it is {_kind(mode)})",
                hint=f"give the path of a regular {what}",
                path=str(path),
            )
        chunks, size = [], 0
        limit = None if max_bytes is None else max_bytes + 1  # one byte more tells "too big"
        while limit is None or size < limit:
            chunk = os.read(fd, 1 << 16 if limit is None else min(1 << 16, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}", path=str(path)) from None
    finally:
        os.close(fd)
    if max_bytes is not None and size > max_bytes:
        raise error(
            f"{what} {path} is larger than {max_bytes:,} bytes",
            hint=f"a {what} is a page of YAML; give the right file",
            path=str(path),
        )
    return b"".join(chunks)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a plain file"


def read_study_yaml(path: Path) -> Any:
    """The YAML document in study file ``path``, read safely (see the module's docstring)."""
    data = read_regular(path, "study file", max_bytes=MAX_STUDY_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidSpec(
            f"study file {path} is not UTF-8 text (byte {data[exc.start : exc.start + 1]!r} at"
            f" offset {exc.start})",
            problems=[f"(file): not UTF-8 text at byte offset {exc.start}"],
            hint="save the study file as UTF-8",
            path=str(path),
        ) from None
    return load_yaml_text(text, f"study file {path}")


def load_yaml_text(text: str, source: str) -> Any:
    """Parse ``text`` as plain YAML; any problem is an ``InvalidSpec`` naming ``source``."""
    try:
        return yaml.load(text, Loader=_NoAliasLoader)
    except RecursionError:
        raise InvalidSpec(
            f"{source} is nested too deeply to be a study",
            problems=["YAML: nested too deeply"],
            hint="a study file is a few levels of keys; give the right file",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or exc
        hint = (
            "write the values out in full instead of anchors and aliases"
            if isinstance(exc, _AliasRefused)
            else "fix the YAML syntax"
        )
        raise InvalidSpec(
            f"{source} is not valid YAML{where}: {problem}",
            problems=[f"YAML{where}: {problem}"],
            hint=hint,
        ) from None
