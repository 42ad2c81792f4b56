"""The code-snapshot verbs over one AIR_HOME (``Client.code``): diff, patch, export, gc."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from air_skills.errors import InvalidInput
from air_skills.runtime.code.code_base import base_patch
from air_skills.runtime.code.code_diff import job_diff, short_code_diff
from air_skills.runtime.code.code_export import (
    check_branch_name,
    export_branch,
    export_folder,
)
from air_skills.runtime.code.code_gc import collect
from air_skills.runtime.code.code_source import JobCode, load_job_code
from air_skills.runtime.store.records import JobRecord


class CodeOps:
    """What ``air diff``, ``air code export``, ``air gc`` and the MCP code resource call."""

    def __init__(
        self,
        home: Path,
        row: Callable[[str], JobRecord],
        sweep: Callable[[bool], dict[str, Any]] | None = None,
    ) -> None:
        self.home = home
        self._row = row  # job id -> its record; raises NotFound for an unknown job
        self._sweep = sweep  # what else `air gc` collects (spare MLflow runs), given dry_run

    def job_code(self, job_id: str) -> JobCode:
        """The job's code as launched (manifest + patch) from the store."""
        row = self._row(job_id)  # a prefix resolved (Client.resolve_id)
        return load_job_code(self.home, row.job_id, row.code)

    def diff(self, job_a: str, job_b: str) -> dict[str, Any]:
        """Config diff and code diff (files with +/- counts, then the unified diff)."""
        return job_diff(self.home, self._row(job_a), self._row(job_b))

    def short_diff(self, job_a: str, job_b: str) -> str:
        """The code difference in one line (``same code`` or the files with +/- counts)."""
        return short_code_diff(self.diff(job_a, job_b)["code"])

    def patch(self, job_id: str) -> str:
        """The full patch of the job's code against its base commit (or its own patch)."""
        return base_patch(self.job_code(job_id))

    def export(
        self,
        job_id: str,
        dest: str | Path | None = None,
        branch: str | None = None,
        repo: str | Path | None = None,
    ) -> dict[str, Any]:
        """Write the job's code to ``dest``, and/or commit it on the new branch ``branch``."""
        if dest is None and branch is None:
            raise InvalidInput("nothing to export to", hint="give a folder, --branch NAME, or both")
        if branch is not None:
            check_branch_name(branch)  # before anything is written, the folder included
        code = self.job_code(job_id)
        out: dict[str, Any] = {"job_id": job_id}
        if dest is not None:
            out["folder"] = export_folder(code, Path(dest))
        if branch is not None:
            out["branch"] = export_branch(code, branch, Path(repo) if repo else None)
        return out

    def gc(self, dry_run: bool = False) -> dict[str, Any]:
        """Remove snapshots that no job within the retention window uses (``air gc``), and
        spare MLflow runs that no supervisor keeps."""
        report = collect(self.home, dry_run=dry_run)
        if self._sweep is not None:
            report.update(self._sweep(dry_run))
        return report
