"""An idempotency key reused for a different spec: what differs, and the conflict it raises.

One comparison for both places that meet a used key: the look-up before a launch prepares
anything (runtime/launch/prepare.py) and the insert that another launcher raced to (Store.queue).
Stdlib only: the runtime is pydantic-free.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from air_skills.errors import InvalidState

# Set by the launch itself (the image's ID is resolved and recorded at launch): not the caller's.
_LAUNCH_FILLED = ("idempotency_key", "image_digest", "allow_duplicate")
_SHOWN = 60  # characters of a differing value in the conflict message
_MISSING = "(not set)"


def check_same_spec(
    key: str, job_id: str, name: str, stored: Mapping[str, Any], new: Mapping[str, Any]
) -> None:
    """Raise ``idempotency-conflict`` naming job ``job_id`` (launched with ``key`` and the
    ``stored`` spec) and the fields where ``new`` differs; return when they agree. Silently
    returning the old job would hide that the new one never ran."""
    differ = spec_differences(stored, new)
    if differ:
        raise InvalidState(
            f"idempotency key {key!r} was used by {job_id} ({name}) with a"
            f" different spec: {'; '.join(differ)}",
            code="idempotency-conflict",
            hint=f"launch the same spec to get {job_id} back, or use a new"
            " idempotency_key for a different job",
            job_id=job_id,
            fields=[d.split(":", 1)[0] for d in differ],
        )


def spec_differences(stored: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``field: old -> new`` for each meaningful field that differs (config keys one by one).

    The store keeps ``env`` names only (values live in the job's folder): env compares names.
    A field the stored spec lacks (a record older than the field) is not compared.
    """
    out: list[str] = []
    for field_name, value in new.items():
        if field_name in _LAUNCH_FILLED or field_name not in stored:
            continue
        old = stored[field_name]
        if field_name == "env":
            old, value = sorted(old or {}), sorted(value or {})
        if field_name == "config" and isinstance(old, dict) and isinstance(value, dict):
            for k in sorted(set(old) | set(value), key=str):
                if old.get(k, _MISSING) != value.get(k, _MISSING):
                    out.append(
                        f"config.{k}: {_short(old.get(k, _MISSING))} -> "
                        f"{_short(value.get(k, _MISSING))}"
                    )
        elif old != value:
            out.append(f"{field_name}: {_short(old)} -> {_short(value)}")
    return out


def _short(value: Any) -> str:
    text = value if value == _MISSING else json.dumps(value, default=str)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."
