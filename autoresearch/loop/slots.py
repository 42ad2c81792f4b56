"""The loop's filling of free slots: how many trials fit (budgets, free GPUs), then the
unlaunched ones, the baseline, the noise repeats and the proposer's trials, launched.

A mixin of ``StudyLoop``, like ``launcher.TrialLauncher`` and ``watch.TrialWatch``: it journals
through the loop's ``emit`` and launches through ``TrialLauncher._launch``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from autoresearch.code.code_base import CodeBase
from autoresearch.journal.journal import StudyState, Trial, TrialStatus
from autoresearch.loop import budgets, waste
from autoresearch.loop.trials import build_request, noise_repeat
from autoresearch.proposers import ProposalRequest, Proposer, suggest
from autoresearch.spec.study_schema import Study


class SlotFilling:
    """Filling the study's free slots with trials; ``StudyLoop`` supplies the attributes below."""

    study: Study
    state: StudyState
    client: Any
    log: Callable[[str], None]
    gpus_per_trial: int
    soft_stop: str | None
    code: CodeBase | None
    _proposer: Proposer | None

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        raise NotImplementedError

    def _launch(self, t: Trial) -> None:
        raise NotImplementedError

    def _active(self) -> list[Trial]:
        raise NotImplementedError

    def _free_slots(self) -> int:
        active = len(self._active())
        slots = budgets.trial_slots(self.study, self.state, active, len(self._unlaunched()))
        if slots <= 0:
            return 0
        if self.gpus_per_trial > 0:
            free = [
                g
                for g in self.client.gpus()
                if g.health == "ok" and not g.cordoned and not g.job_ids
            ]
            fit = len(free) // self.gpus_per_trial
            slots = min(slots, fit if active else max(fit, 1))
        return max(slots, 0)

    def _unlaunched(self) -> list[Trial]:
        # the final re-evaluation's runs are launched by final_phase, never by the search
        return [t for t in self.state.by_status(TrialStatus.PROPOSED) if t.source != "final"]

    def _fill(self) -> int:
        """Launch as many trials as there are free slots; returns how many were launched."""
        slots = self._free_slots()
        if slots <= 0:
            return 0
        if not budgets.fits_wall_time(self.study, self.state, time.time()):
            self.soft_stop = "budget:wall_time_min"
            self.log("not launching more: a trial would not finish within the wall time left")
            return 0
        launched = 0
        for t in self._unlaunched()[:slots]:
            self._launch(t)
            launched += 1
        slots -= launched
        study = self.study
        while slots > 0 and 0 not in self.state.trials:
            # Trial 0 even when prior jobs (api.start_study's prior_jobs) took the next numbers.
            self._propose_fixed("baseline", {}, study.base_config, "the base config", number=0)
            self._launch(self.state.trials[0])
            launched, slots = launched + 1, slots - 1
        if waste.baseline_pending(self.state):
            return launched  # no trial beside the baseline: one that fails stops the study
        noise_done = sum(1 for t in self.state.trials.values() if t.source == "noise")
        while slots > 0 and noise_done < study.noise.repeats:
            noise_done += 1
            config, why = noise_repeat(study, noise_done)
            number = self._propose_fixed("noise", {}, config, why)
            self._launch(self.state.trials[number])
            launched, slots = launched + 1, slots - 1
        if slots <= 0:
            return launched
        pins = self.state.steering.pins
        for queued in list(self.state.steering.queue)[:slots]:  # steer_study's, first
            diff = {**(queued.get("diff") or queued.get("config") or {}), **pins}
            code = {k: queued[k] for k in ("patch", "parent") if queued.get(k) is not None}
            number = self.state.next_number
            self.emit(
                "proposal",
                trial=number,
                source="steer",
                diff=diff,
                config=study.config_for(diff),
                rationale="queued by steer_study"
                + (f": {note}" if (note := queued.get("note")) else ""),
                steer_id=queued.get("id"),
                **code,
            )
            self._launch(self.state.trials[number])
            launched, slots = launched + 1, slots - 1
        if slots <= 0:
            return launched
        request = self._request(slots)
        assert self._proposer is not None
        result = suggest(self._proposer, request)
        for kind, fields in result.events:
            self.emit(kind, **fields)
        for p in result.proposals:
            number = self.state.next_number
            diff = {**p.diff, **pins}  # a pinned parameter holds, whatever the proposer said
            self.emit(
                "proposal",
                trial=number,
                source=p.source,
                diff=diff,
                config=study.config_for(diff),
                rationale=p.rationale,
                **_code_fields(p),
            )
            self._launch(self.state.trials[number])
            launched += 1
        if result.stop_reason:
            self.soft_stop = result.stop_reason
            self.log(f"not launching more: {result.stop_reason}")
        elif not result.proposals and not self._active():
            self.soft_stop = "search space exhausted"
        return launched

    def _propose_fixed(
        self, source: str, diff: dict, config: dict, why: str, number: int | None = None
    ) -> int:
        number = self.state.next_number if number is None else number
        self.emit("proposal", trial=number, source=source, diff=diff, config=config, rationale=why)
        return number

    def _request(self, n: int, purpose: str = "propose") -> ProposalRequest:
        return build_request(self.study, self.state, n, purpose, now=time.time(), code=self.code)


def _code_fields(p: Any) -> dict[str, Any]:
    """A proposal's code fields for the journal (none for a config-only trial)."""
    if p.patch is None and p.parent is None:
        return {}
    return {"patch": p.patch, "parent": p.parent, "patch_summary": p.patch_summary}
