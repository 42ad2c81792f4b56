"""The ``autoresearch`` command: run, watch, report, stop studies, and the offline demo.

Every command takes ``--json``; exit 0 on success, 2 on bad input, 1 otherwise, and `run`
exits 3 when the study ran and failed (STUDY_FAILED_EXIT). Errors print ``[code] what
happened`` and ``Next: what to do``.
"""

from autoresearch.cli import studies
from autoresearch.cli.app import STUDY_FAILED_EXIT, app
from autoresearch.cli.demo import DEMO_BASE, DEMO_TRIALS, demo_gains, demo_study, find_examples

__all__ = [
    "DEMO_BASE",
    "DEMO_TRIALS",
    "STUDY_FAILED_EXIT",
    "app",
    "demo_gains",
    "demo_study",
    "find_examples",
    "main",
    "studies",
]


def main() -> None:
    """`autoresearch`: --version, usage errors in the requested format, exit codes."""
    from air_skills.cli.usage import run_app

    run_app(app, "autoresearch")
