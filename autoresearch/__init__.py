"""autoresearch: proposers suggest config diffs, trials run concurrently through the AIR
``Client``, losers stop early, the best is kept, within hard budgets; all of it journaled.

Names are imported lazily, so that ``autoresearch --help`` starts fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Study": "autoresearch.study.study",
    "load_study": "autoresearch.study.study",
    "parse_study": "autoresearch.study.study",
    "run_study": "autoresearch.loop.loop",
    "StudyLoop": "autoresearch.loop.loop",
    "start_study": "autoresearch.api",
    "get_study": "autoresearch.api",
    "suggest_trials": "autoresearch.api",
    "stop_study": "autoresearch.api",
    "write_report": "autoresearch.report.report",
    "Proposer": "autoresearch.proposers",
    "make_proposer": "autoresearch.proposers",
}

__all__ = [
    "Proposer",
    "Study",
    "StudyLoop",
    "get_study",
    "load_study",
    "make_proposer",
    "parse_study",
    "run_study",
    "start_study",
    "stop_study",
    "suggest_trials",
    "write_report",
]

if TYPE_CHECKING:
    from autoresearch.api import get_study, start_study, stop_study, suggest_trials
    from autoresearch.loop.loop import StudyLoop, run_study
    from autoresearch.proposers import Proposer, make_proposer
    from autoresearch.report.report import write_report
    from autoresearch.study.study import Study, load_study, parse_study


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'autoresearch' has no attribute {name!r}")
    return getattr(import_module(module), name)
