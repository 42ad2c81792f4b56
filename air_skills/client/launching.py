"""The Client's launches: a spec checked (JobSpec, or a SpecView from a shell: models/
spec_view.py), made ready (who launches, duplicates, its folder, data and command) and handed to
its backend; reruns of a job's stored code. Mixed into ``Client`` (client/core.py)."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from air_skills import settings
from air_skills.errors import AirError, InvalidSpec
from air_skills.runtime.launch import duplicates
from air_skills.runtime.launch.launch_check import check_command, refuse
from air_skills.runtime.launch.prepare import check_reserve

if TYPE_CHECKING:  # pydantic's models: imported where one is made (launch_view needs none)
    from air_skills.models import JobInfo, JobSpec
    from air_skills.models.spec_view import SpecView


def _resolved(folder: str) -> Path:
    """``folder`` made absolute, with ``~`` and symlinks expanded."""
    return _real_path(os.path.abspath(os.path.expanduser(folder)))


@functools.lru_cache(maxsize=64)
def _real_path(absolute: str) -> Path:
    # One lstat per part of the path: cached, as one process mostly launches from one folder.
    return Path(absolute).resolve()


class LaunchMixin:
    """Launching and rerunning jobs (mixed into ``Client``)."""

    def launch(
        self, spec: JobSpec | dict[str, Any], dry_run: bool = False, *, strict: bool = False
    ) -> JobInfo:
        """Queue a job and start it if GPUs are free; returns as soon as it is queued/started.

        With ``dry_run`` nothing is recorded: the returned info says what would happen, and
        whether the command would start (its executable on the job's PATH, a script argument
        in the workdir); with ``strict`` too, a command that would not start is refused
        (``invalid-spec``). A real launch refuses it too, nothing queued, unless the spec says
        ``check_command: false`` (a job that creates its script at run time).
        """
        return self._launch(spec, dry_run, strict=strict)

    def _launch(
        self,
        spec: JobSpec | dict[str, Any],
        dry_run: bool,
        snapshot: Any = None,
        strict: bool = False,
        *,
        batch: bool = False,
    ) -> JobInfo:
        from air_skills.models import JobSpec

        ready, problems = self._ready(JobSpec.parse(spec), dry_run, snapshot, strict, batch)
        with self._duplicate_explained():
            info = self.backend(ready.backend).launch(ready, dry_run=dry_run)
        if problems:
            info.message += "; WOULD NOT START: " + "; ".join(problems)
        if dry_run:
            digest = info.code.digest if info.code else None
            twice = duplicates.dry_run_note(self.store, ready, digest)
            info.message += f"; {twice}" if twice else ""
        else:
            info.message += self._launched(info.job_id, info.code is not None)
        return info

    def launch_view(self, spec: SpecView) -> dict[str, Any] | None:
        """``launch(spec, strict=True)`` of a spec that models/spec_view.py checked, its reply
        as JobInfo's JSON (backends/job_view.py), without pydantic: `air launch` from a shell
        (cli/fast/launch.py). The same steps as ``launch``; None, with nothing done, for a
        backend that queues no view (Ray): launch the spec's dict then."""
        from air_skills.backends.job_view import job_json

        name = spec.backend
        if "backend" not in spec.model_fields_set and self.store.setting("backend"):
            name = self.store.setting("backend")
        if not hasattr(self.backend(name), "queue"):
            return None
        ready, _ = self._ready(spec, False, None, True, False)
        with self._duplicate_explained():
            row = self.backend(ready.backend).queue(ready)
        reply = job_json(row)
        reply["message"] += self._launched(row.job_id, row.code is not None)
        return reply

    def _ready(
        self,
        spec: Any,
        dry_run: bool,
        snapshot: Any,
        strict: bool,
        batch: bool,
        reserve: bool = True,
    ) -> tuple[Any, list[str]]:
        """A checked spec (a JobSpec or a SpecView) made ready to launch: the home's default
        backend, who launches, duplicates, its folder and data resolved; its command checked
        (``problems``: why it would not start; refused unless a dry run that is not strict)
        and, for a real launch, the disk reserve (unless ``reserve`` is False: a batch's
        group checks it once)."""
        if "backend" not in spec.model_fields_set and self.store.setting("backend"):
            # AIR_HOME's default backend (python -m air_skills.backends.ray config --backend)
            spec = spec.model_copy(update={"backend": self.store.setting("backend")})
        spec = self._for_launcher(spec)
        if spec.allow_duplicate is None:  # whether Store.queue refuses the same experiment
            spec = spec.model_copy(update={"allow_duplicate": not self._dedup(batch)})
        spec = self._resolve(spec)
        spec = self._check_data(spec)  # refused data inputs: nothing is created
        problems = check_command(spec, snapshot) if dry_run or spec.check_command else []
        if problems and (strict or not dry_run):  # `pyhton`, `trian.py`: refused, none queued
            raise refuse(problems, dry_run)
        if not dry_run and reserve:  # under AIR_DISK_RESERVE_MB: refused before a snapshot
            check_reserve(self.home)
        return spec, problems

    @contextlib.contextmanager
    def _duplicate_explained(self) -> Iterator[None]:
        """A launch refused as a duplicate names the job's result, for the caller to read."""
        try:
            yield
        except AirError as exc:
            if exc.code == "duplicate":
                duplicates.explain(exc, self.store, self.tracker)
            raise

    def _launched(self, job_id: str, has_code: bool) -> str:
        """What a real launch's message adds (a near duplicate); old snapshots collected."""
        near = duplicates.near_note(self.store, job_id, float(settings.get("AIR_DEDUP_NEAR")))
        if has_code:
            from air_skills.runtime.code.code_gc import maybe_collect

            maybe_collect(self.home)  # old snapshots go, at most once a day (one stat else)
        return "; " + near if near else ""

    def _dedup(self, batch: bool) -> bool:
        """Whether a launch is refused as a duplicate of a queued, running or done job
        (AIR_DEDUP: ``identities``, the default, checks air-mcp tokens' launches and batches
        (launch_jobs, suggest_trials); ``always`` every launch; ``off`` none)."""
        mode = settings.get("AIR_DEDUP")
        if mode == "off":
            return False
        return mode == "always" or batch or self.identity is not None

    def rerun(
        self,
        job_id: str,
        config: dict[str, Any] | None = None,
        patch: str | None = None,
        dry_run: bool = False,
        *,
        strict: bool = False,
    ) -> JobInfo:
        """Launch ``job_id``'s stored snapshot (not the tree as it is now) and config again:
        ``config`` keys over its config, ``patch`` instead of its patch, on the same base.
        ``dry_run`` and ``strict`` as for ``launch``."""
        from air_skills.runtime.code.code_source import load_job_code, rerun_snapshot, rerun_spec
        from air_skills.runtime.code.job_code import pinned_snapshot

        job_id = self.resolve_id(job_id)
        row = self._row(job_id)
        snapshot = rerun_snapshot(load_job_code(self.home, job_id, row.code))
        spec = rerun_spec(self.home, job_id, row.spec_dict(), config, patch)
        spec["allow_duplicate"] = True  # an explicit rerun is never a duplicate
        with pinned_snapshot(snapshot):
            return self._launch(spec, dry_run, snapshot, strict=strict)

    def _resolve(self, spec: JobSpec) -> JobSpec:
        workdir = _resolved(spec.workdir or os.getcwd())
        if not workdir.is_dir():
            raise InvalidSpec(
                f"workdir {workdir} does not exist",
                hint="give an existing folder as workdir (default: the current one)",
            )
        updates: dict[str, Any] = {"workdir": str(workdir)}
        if spec.project is None:
            updates["project"] = spec.resolved_project()
        return spec.model_copy(update=updates)

    def _check_data(self, spec: JobSpec) -> JobSpec:
        """Resolve data inputs under AIR_DATA_ROOTS and fingerprint them (real paths, digests)."""
        if not spec.data:
            return spec
        from air_skills.models import DataInput
        from air_skills.tracking.data import prepare_inputs

        data = [DataInput(**d) for d in prepare_inputs(spec.data, self.home, spec.workdir)]
        return spec.model_copy(update={"data": data})
