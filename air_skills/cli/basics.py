"""What every `air` command shares without typer or rich: the Client it uses, its JSON output.

cli/output.py re-exports both for the typer commands; the fast paths (cli/fast.py,
cli/fast_launch.py) import them from here, so the two give the same bytes.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def client() -> Any:
    """The Client, imported late: `air --help` and parsing errors stay fast."""
    from air_skills.client import Client

    client = Client()
    # A launch keeps MLflow out of this short-lived process: it claims a spare run, or its
    # supervisor makes the run (runtime/launch/launch_run.py).
    client.runtime.make_runs_here = False
    return client


def _dump(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, list):
        return [_dump(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _dump(v) for k, v in obj.items()}
    return obj


def emit_json(obj: Any) -> None:
    """``obj`` (models, lists and dicts of them) as indented JSON on stdout."""
    sys.stdout.write(json.dumps(_dump(obj), indent=1, default=str) + "\n")
