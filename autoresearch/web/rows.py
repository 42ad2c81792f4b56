"""The study page's trial table: one row per trial, each kept with a copy of its trial's
fields and made again only when they changed, or while the trial runs (its duration and cost
move with the clock); its JSON is kept with it. After a journal line, a 1,000-trial table costs
~1,000 dict compares, not 1,000 rows and their JSON.
"""

from __future__ import annotations

import json
from typing import Any

from autoresearch.journal.journal import Trial
from autoresearch.report.cost import Pricing, trial_cost
from autoresearch.report.hardware import trial_class
from autoresearch.report.summary import _decision
from autoresearch.web.live import diff_text, duration_s

MAX_RATIONALE = 300


def trial_row(
    t: Trial, now: float, mlflow: str | None, experiment_id: str | None, pricing: Pricing
) -> dict[str, Any]:
    """One row of the trial table."""
    decision = _decision(t)
    word, _, reason = (decision or "").partition(": ")
    confirmed = t.confirmed or {}
    cost = trial_cost(t, now, pricing)
    link = None
    if mlflow and t.run_id:
        link = f"{mlflow.rstrip('/')}/#/experiments/{experiment_id or 0}/runs/{t.run_id}"
    return {
        "n": t.number,
        "source": t.source,
        "status": t.status.value,
        "diff": t.diff,
        "diff_text": diff_text(t.diff) or "(base)",
        "value": t.value,
        "std": confirmed.get("std"),
        "seeds": confirmed.get("n"),
        "decision": word or None,
        "reason": reason or None,
        "duration_s": duration_s(t, now),
        "usd": cost["usd"],
        "gpu_hours": cost["gpu_hours"],
        "llm_usd": cost["llm_usd"],
        "hardware": trial_class(t),
        "job_id": t.job_id,
        "run_id": t.run_id,
        "mlflow": link,
        "parent": t.parent,
        "code": bool(t.patch) or t.parent is not None,
        "patch_summary": t.patch_summary,
        "rationale": (t.rationale or "")[:MAX_RATIONALE],
        "failure": t.failure,
        "steps": t.steps,
    }


def row_json(row: dict[str, Any]) -> bytes:
    """A row as the view's JSON has it."""
    return json.dumps(row, default=str, separators=(",", ":")).encode()


Kept = tuple[dict[str, Any], tuple, dict[str, Any], bytes]  # (fields, context, row, its JSON)


class TrialRows:
    """One study's rows as last made (not thread-safe: one build at a time)."""

    def __init__(self) -> None:
        self._kept: dict[int, Kept] = {}
        self._texts: list[bytes] = []

    def rows(
        self,
        trials: list[Trial],
        now: float,
        mlflow: str | None,
        experiment_id: str | None,
        pricing: Pricing,
    ) -> list[dict[str, Any]]:
        """The rows of ``trials`` (a row handed out is not changed afterwards)."""
        context = (mlflow, experiment_id, pricing.flat, sorted(pricing.table.items()))
        kept: dict[int, Kept] = {}
        out, texts = [], []
        for t in trials:
            fields = t.__dict__  # a journal's replay assigns a trial's fields, never edits them
            hit = self._kept.get(t.number)
            if hit is not None and hit[1] == context and hit[0] == fields:
                row, text = hit[2], hit[3]
            else:
                row = trial_row(t, now, mlflow, experiment_id, pricing)
                text = row_json(row)
            if t.job_done or t.started_at is None:  # its row does not move with the clock
                kept[t.number] = (dict(fields), context, row, text)
            out.append(row)
            texts.append(text)
        self._kept, self._texts = kept, texts
        return out

    def json(self) -> bytes:
        """The rows of the last ``rows`` call as a JSON array."""
        return b"[" + b",".join(self._texts) + b"]"
