"""Which hardware class each trial ran on, and the note when a study's results mix classes."""

from __future__ import annotations

import functools

from air_skills.gpu.hardware import gpu_class, not_comparable
from autoresearch.journal.journal import Trial, TrialStatus

_class_of = functools.lru_cache(maxsize=512)(gpu_class)  # a study has a few names, many trials


def trial_class(t: Trial) -> str:
    """ "H100 80GB", "2x A10G", "CPU"; "" before its launch."""
    if t.gpu_type:
        classes = sorted({_class_of(name) for name in t.gpu_type.split(",") if name.strip()})
        if classes == ["CPU"]:  # simulated GPUs: the CPU computes, as in a CPU slot
            return "CPU"
        return (f"{t.gpus}x " if t.gpus > 1 else "") + " + ".join(classes)
    return "CPU" if t.job_id else ""


def hardware_note(trials: list[Trial]) -> str | None:
    """ "not comparable: H100 80GB vs A10G" when the study's finished trials ran on different
    hardware classes (their values then do not compare), else None."""
    return not_comparable(
        sorted({trial_class(t) for t in trials if t.status == TrialStatus.SUCCEEDED} - {""})
    )
