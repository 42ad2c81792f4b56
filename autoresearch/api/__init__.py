"""Plain functions over studies, for the CLI and the MCP server (which only registers them).

``start_study`` starts a loop (in the background by default), ``get_study`` reads a compact
state, ``suggest_trials`` returns the proposer's next diffs without running them, and
``stop_study`` stops a loop (and its running trials). Each returns a JSON-able dict.
"""

from autoresearch.api.control import steer_study, stop_study
from autoresearch.api.reading import get_study, load_state, study_folder, summarize, trial_patch
from autoresearch.api.start import start_study
from autoresearch.api.suggest import suggest_trials

__all__ = [
    "get_study",
    "load_state",
    "start_study",
    "steer_study",
    "stop_study",
    "study_folder",
    "suggest_trials",
    "summarize",
    "trial_patch",
]
