"""The loop's launching half: a trial's job (with its code patch), the study's code base, and
the protected-file checks before a trial starts and after it ends.

A mixin of ``StudyLoop``, like ``watch.TrialWatch``: it journals through the loop's ``emit``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from air_skills.errors import AirError, InvalidSpec
from autoresearch.code.code_base import CodeBase, base_job_code
from autoresearch.code.code_check import chain_of
from autoresearch.journal.journal import StudyState, Trial
from autoresearch.loop.evaluator_boot import end_stray
from autoresearch.loop.stall_auto import trial_stall
from autoresearch.loop.trials import trial_spec
from autoresearch.spec.study_schema import Study


class TrialLauncher:
    """Launching the study's trials; ``StudyLoop`` supplies the attributes below."""

    study: Study
    state: StudyState
    client: Any
    log: Callable[[str], None]
    gpus_per_trial: int
    dir: Path
    code: CodeBase | None = None
    undecided: list[int]
    refused = 0  # trials whose code could not be built since the loop last looked

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        raise NotImplementedError

    def _home(self) -> Path:
        return Path(getattr(self.client, "home", None) or self.client.runtime.home)

    def _start_code(self) -> None:
        """Take the study's base snapshot once (a resume uses the journaled one)."""
        if self.study.code is None:
            return
        if end_stray(self.dir / ".evaluate"):  # a killed loop's evaluator: its result is lost
            self.log("ended the evaluator a stopped loop left running; it runs again")
        if self.study.sandbox == "off":  # written in the study: said in its journal and report
            note = (
                "sandbox: off (written in the study): trials run unsandboxed, with the user's"
                " files, the code store and this study's journal within their reach"
            )
            if note not in self.state.warnings:
                self.emit("warning", message=note)
        if self.state.code_base is not None:
            self.code = CodeBase(self._home(), self.state.code_base)
            return
        job = base_job_code(self.client, self.study.base_job) if self.study.base_job else None
        self.code = CodeBase.take(self._home(), self.study, job)
        self.emit("code_base", **self.code.record)
        rec = self.code.record
        self.log(
            f"code base {rec['digest'][:12]} ({rec['mode']}"
            + (f", commit {rec['commit'][:12]}" if rec.get("commit") else "")
            + f"): editable {', '.join(rec['editable'])}; protected"
            f" {', '.join(rec['protected']) or '(none)'}"
        )

    def _launch(self, t: Trial) -> None:
        attempt = t.attempt + 1
        spec = trial_spec(self.study, self.state, t, self.gpus_per_trial)
        spec = spec.model_copy(update=trial_stall(self.study, self.state, self._home()))
        chain = chain_of(self.state.trials, t.number) if self.code is not None else []
        started = time.time()
        try:
            if self.code is not None:
                patch, notes = self.code.launch_patch(chain)
                for note in notes:
                    if note not in self.state.warnings:
                        self.emit("warning", message=note)
                spec = spec.model_copy(update={"patch": patch})
            if self.study.base_job:  # the code that job ran: its snapshot and patch
                info = self.client.launch_on(self.study.base_job, spec)
            else:
                info = self.client.launch(spec)
        except Exception as exc:
            why = _code_failure(exc) if chain else None
            if why is None:
                raise
            # this trial's code cannot be built: it fails alone, the study goes on
            self.emit("launch_refused", trial=t.number, failure=why, failure_kind="patch")
            self.undecided.append(t.number)
            self.refused += 1
            self.log(f"trial {t.number} FAILED before launch: {why}")
            return
        self.emit(
            "launched",
            trial=t.number,
            job_id=info.job_id,
            run_id=info.run_id,
            attempt=attempt,
            gpus=self.gpus_per_trial,
            launch_s=round(time.time() - started, 4),
            code_digest=info.code.digest if getattr(info, "code", None) else None,
            gpu_type=self._gpu_type(info),
        )
        self.log(f"trial {t.number} launched as {info.job_id} ({t.source}): {t.diff or '(base)'}")
        if self.code is not None:
            changed = self.code.tampered(self.code.view_of(info.job_id))
            if changed:  # its view is not the base's protected code: it must not run
                self.emit("tampered", trial=t.number, when="before start", files=changed)
                with contextlib.suppress(AirError):
                    self.client.cancel(info.job_id, reason="protected files differ from the base")

    def _gpu_type(self, info: Any) -> str | None:
        if not getattr(info, "gpus", None):
            return None
        with contextlib.suppress(AirError, AttributeError):
            names = {g.index: g.name for g in self.client.gpus()}
            kinds = sorted({names.get(i, "?") for i in info.gpus})
            return ", ".join(kinds)
        return None

    def _evaluate(self, t: Trial, fields: dict[str, Any]) -> None:
        """Replace the trial's own objective by the trusted evaluator's (``evaluate:``)."""
        from autoresearch.loop.evaluate import evaluate

        assert self.code is not None and t.job_id
        jdir = self._home() / "jobs" / t.job_id
        got = evaluate(self.code, self.study, jdir, t.config, self.dir / ".evaluate")
        metric = self.study.objective.metric
        fields["reported"] = fields.get("value")  # what the trial said of itself
        fields["evaluation"] = {"metrics": got.metrics, "seconds": round(got.seconds, 3)}
        if got.tampered:  # the store's protected files were rewritten: never counted
            if t.number not in self.state.tampered:
                self.emit("tampered", trial=t.number, when="evaluator", files=got.tampered)
            fields.update(status="FAILED", failure_kind="tampered", failure=got.problem,
                          value=None)  # fmt: skip
            return
        if got.problem:
            fields.update(status="FAILED", failure_kind="evaluator", failure=got.problem,
                          value=None, log_tail=got.output)  # fmt: skip
            return
        fields["value"] = got.metrics[metric]
        fields["metrics"] = {**fields.get("metrics", {}), **got.metrics}

    def _tamper_after(self, t: Trial) -> list[str]:
        """Protected files the trial's job changed (journaled once; empty for other studies)."""
        if self.code is None or not t.job_id:
            return []
        changed = self.code.tampered(self.code.view_of(t.job_id))
        if changed and t.number not in self.state.tampered:
            self.emit("tampered", trial=t.number, when="after end", files=changed)
        return changed or list(self.state.tampered.get(t.number, []))


def _code_failure(exc: Exception) -> str | None:
    """Why a patched trial's code could not be built, or None for an error of the study's
    (a store gone, a refused launch for another reason): those stop the loop as before."""
    if isinstance(exc, InvalidSpec):
        text = exc.message
        prefix = "patch refused, nothing was launched: "
        return text[len(prefix) :] if text.startswith(prefix) else None
    if isinstance(exc, AirError):
        return None
    # an unforeseen way for a patch to break the view (OSError, UnicodeError...)
    return f"its code could not be built: {type(exc).__name__}: {str(exc)[:300]}"
