"""A job spec checked without pydantic, for `air launch` from a shell (cli/fast/launch.py).

``quick_spec(data)`` gives a ``SpecView`` only when every field is plainly valid by JobSpec's
rules (models/spec.py): the same limits, patterns, choices and defaults, which a test reads
back from JobSpec's schema, and the same dump. Anything it is not sure of (a data input, a
gang, a value pydantic would coerce or refuse) gives None: JobSpec.parse checks that spec and
words its errors, so no error is written twice. The launch reads a view as it reads a
JobSpec (attributes, ``model_dump``, ``model_copy``, ``model_fields_set``): one launch path.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from typing import Any

from air_skills.models.config_json import json_problem
from air_skills.vocabulary import NAME_PATTERN

MAX_GPUS_PER_JOB = 1024
# What a terminal obeys instead of showing: C0 and C1 controls (ESC starts an escape sequence),
# DEL, and the bidi controls that reorder the text shown around them.
CONTROL_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
IMAGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$"
IMAGE_DIGEST_PATTERN = r"^(sha256:)?[0-9a-f]{8,64}$"

# JobSpec's fields in its order, with their defaults as its JSON dump writes them
DEFAULTS: dict[str, Any] = {
    "command": None, "name": None, "workdir": None, "config": {}, "config_as": "both",
    "gpus": 0, "procs": 1, "nodes": 1, "cpus": None, "priority": "normal",
    "preemptible": False, "timeout_min": None, "max_retries": 0, "stall_timeout_min": None,
    "on_stall": None, "env": {}, "experiment": None, "tags": {}, "idempotency_key": None,
    "backend": "local", "project": None, "data": [], "track": True, "deep_preflight": False,
    "code": "snapshot", "patch": None, "launched_by": None, "allow_duplicate": None,
    "image": None, "image_digest": None, "sandbox": None, "writable": [], "disk_gb": None,
    "hidden": [], "network": True, "check_command": True,
}  # fmt: skip
# field -> (minimum, maximum) of an integer
INTS: dict[str, tuple[int, int]] = {
    "gpus": (0, MAX_GPUS_PER_JOB), "cpus": (1, 1024), "max_retries": (0, 100),
}  # fmt: skip
# field -> (minimum, exclusive?, maximum or None) of a number
FLOATS: dict[str, tuple[float, bool, float | None]] = {
    "timeout_min": (0, True, None), "stall_timeout_min": (0, False, 10080),
    "disk_gb": (0, True, None),
}  # fmt: skip
# field -> (min length, max length or None) of a text, which may not hold a NUL byte
TEXTS: dict[str, tuple[int, int | None]] = {
    "name": (0, 200), "workdir": (0, None), "experiment": (0, 500),
    "idempotency_key": (1, 200), "patch": (0, None), "launched_by": (0, 64),
}  # fmt: skip
PATTERNS = {"project": NAME_PATTERN, "image": IMAGE_PATTERN, "image_digest": IMAGE_DIGEST_PATTERN}
CHOICES: dict[str, tuple[Any, ...]] = {
    "config_as": ("file", "args", "both"), "priority": ("low", "normal", "high"),
    "on_stall": ("fail", "retry", "notify"), "backend": ("local", "ray", "slurm"),
    "code": ("snapshot", "live"), "sandbox": ("auto", "on", "off"),
}  # fmt: skip
BOOLS = ("preemptible", "track", "deep_preflight", "network", "check_command", "allow_duplicate")
MAY_BE_NONE = {k for k, v in DEFAULTS.items() if v is None} - {"command"}
_COMPILED = {k: re.compile(p) for k, p in PATTERNS.items()}


def split_command(value: Any) -> Any:
    """A command given as one string becomes argv by shlex: it is never run by a shell."""
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot split command: {exc}") from exc
    return value


def resolved_project(project: str | None) -> str:
    """The project a job counts against: its own, else AIR_PROJECT, else ``default``."""
    from air_skills import settings

    return project or settings.get("AIR_PROJECT") or "default"


def procs_per_node(gpus: int, procs: int | str) -> int:
    """The number of processes on each node (``procs: gpu`` is one per GPU)."""
    return gpus if procs == "gpu" else int(procs)


def _text(value: Any) -> bool:
    return isinstance(value, str) and "\x00" not in value


def _plain(key: str, value: Any) -> Any:
    """``value`` as JobSpec's dump writes it, or raises ValueError when unsure."""
    if value is None and key in MAY_BE_NONE:
        return None
    if key in INTS:
        low, high = INTS[key]
        if type(value) is int and low <= value <= high:
            return value
    elif key in FLOATS:
        low, exclusive, high = FLOATS[key]
        if type(value) in (int, float) and math.isfinite(value):
            above = value > low if exclusive else value >= low
            if above and (high is None or value <= high):
                return float(value)
    elif key in TEXTS:
        shortest, longest = TEXTS[key]
        if _text(value) and len(value) >= shortest and (longest is None or len(value) <= longest):
            if key != "name" or not CONTROL_CHARS.search(value):
                return value
    elif key in PATTERNS:
        if isinstance(value, str) and _COMPILED[key].fullmatch(value):
            return value
    elif key in CHOICES:
        if isinstance(value, str) and value in CHOICES[key]:
            return value
    elif key in BOOLS:
        if type(value) is bool:
            return value
    elif key in ("procs", "nodes"):  # a gang: JobSpec checks it (torch, the backend)
        if type(value) is int and value == 1:
            return value
    elif key in ("writable", "hidden"):
        if isinstance(value, list) and all(_text(v) for v in value):
            return list(value)
    elif key in ("env", "tags"):
        if isinstance(value, dict) and all(_text(k) and _text(v) for k, v in value.items()):
            if key == "tags" or all(k and "=" not in k for k in value):
                return dict(value)
    elif key == "config":
        if isinstance(value, dict) and all(type(k) is str for k in value):
            if json_problem(value) is None:
                return json.loads(json.dumps(value))
    elif key == "data":
        if value == []:
            return []
    elif key == "command":
        argv = split_command(value)
        if isinstance(argv, list) and argv and all(_text(a) for a in argv) and argv[0].strip():
            return list(argv)
    raise ValueError(key)


def quick_spec(data: dict[str, Any]) -> SpecView | None:
    """``data`` as a checked view when it is plainly a valid JobSpec; None: JobSpec decides."""
    if not isinstance(data, dict) or "command" not in data or set(data) - set(DEFAULTS):
        return None
    fields = dict(DEFAULTS)
    try:
        for key, value in data.items():
            fields[key] = _plain(key, value)
    except (ValueError, RecursionError):
        return None
    if fields["patch"] is not None and fields["code"] == "live":
        return None
    return SpecView(fields, set(data))


class SpecView:
    """A checked spec's fields as JobSpec dumps them, read as a JobSpec is read by the launch
    (attributes, ``model_dump``, ``model_copy``, ``model_fields_set``)."""

    def __init__(self, fields: dict[str, Any], given: set[str]) -> None:
        self._fields = fields
        self.model_fields_set = given

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_fields"][name]
        except KeyError:
            raise AttributeError(name) from None

    def model_dump(self, mode: str = "json") -> dict[str, Any]:
        """A copy of the fields (JSON values, JobSpec's order)."""
        return json.loads(json.dumps(self._fields))

    def model_copy(self, update: dict[str, Any] | None = None) -> SpecView:
        """A view with ``update`` over these fields (not checked again, as pydantic's)."""
        update = dict(update or {})
        return SpecView({**self._fields, **update}, self.model_fields_set | set(update))

    def resolved_project(self) -> str:
        return resolved_project(self.project)

    def procs_per_node(self) -> int:
        return procs_per_node(self.gpus, self.procs)
