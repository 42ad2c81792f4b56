"""The Client's view of this machine's pool: GPUs, CPU slots, cordons and a job's history."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from air_skills.errors import InvalidInput, InvalidState, NotFound
from air_skills.gpu.providers import provider
from air_skills.runtime.scheduling import passes as local
from air_skills.status import JobStatus

if TYPE_CHECKING:
    from air_skills.models import GpuInfo


class PoolMixin:
    """GPUs, capacity, cordons and events (mixed into ``Client``)."""

    def gpus(self) -> list[GpuInfo]:
        """This machine's GPUs: health, cordon and why, the jobs on each."""
        from air_skills.gpu.inventory import gpu_table

        self.reconcile()
        return gpu_table(self.store.gpu_rows(), self.store.running_rows("local"))

    def excluded_nodes(self) -> list[str]:
        """Slurm nodes excluded from a job's retries this week: which, for which job, why,
        since when (one line each; none where Slurm is not used)."""
        from air_skills.backends.slurm.cordons import notes

        return notes(self.store)

    def capacity(self) -> dict[str, dict[str, int]]:
        """This machine's CPU slots and GPUs: how many, in use, and jobs queued for each."""
        self.reconcile()
        live = self.store.live_rows("local")
        running = [r for r in live if r.status == JobStatus.RUNNING.value]
        queued = [r for r in live if r.status == JobStatus.QUEUED.value]
        wants_gpu = [bool(r.spec_dict().get("gpus")) for r in queued]
        return {
            "cpu_slots": {
                "total": local.cpu_slots(),
                "used": sum(1 for r in running if not r.gpu_list()),
                "queued": wants_gpu.count(False),
            },
            "gpus": {
                "total": len(local.gpu_indices()),
                "schedulable": len(local.schedulable_gpus(self.store)),
                "used": len({g for r in running for g in r.gpu_list()}),
                "queued": wants_gpu.count(True),
            },
        }

    def holders(self) -> dict[str, str]:
        """Each running job as `job-id (project)`, or `(project, borrowing)` beyond its quota."""
        return {
            r.job_id: f"{r.job_id} ({r.project}" + (", borrowing)" if r.borrowing else ")")
            for r in self.store.running_rows()
        }

    def _check_gpu_index(self, index: int) -> None:
        indices = [d.index for d in provider().devices()]
        if index not in indices:
            raise NotFound(
                f"no GPU {index} on this machine ({provider().note})",
                hint="list GPUs with `air gpus`",
                valid_keys=indices,
            )

    def cordon(self, index: int, reason: str) -> GpuInfo:
        self._check_gpu_index(index)
        if not reason or not reason.strip():
            raise InvalidInput("a cordon needs a reason", hint="pass --reason 'why'")
        self.store.cordon(index, reason.strip())
        return next(g for g in self.gpus() if g.index == index)

    def uncordon(self, index: int, force: bool = False) -> GpuInfo:
        """Bring a GPU back after a passing preflight (``force`` skips it, and is recorded)."""
        self._check_gpu_index(index)
        faults = [f for f in provider().faults([index]) if f.critical and f.index == index]
        if faults and not force:
            raise InvalidState(
                f"GPU {index} still fails its check: "
                + "; ".join(f"{f.kind}: {f.detail}" for f in faults),
                hint="fix the GPU (or reset it), then retry; --force overrides",
                gpu=index,
            )
        failing = "; ".join(f"{f.kind}: {f.detail}" for f in faults)
        self.store.uncordon(
            index, f"(forced past a failing check: {failing})" if faults else "(check passed)"
        )
        local.schedule_pass(self.store)
        return next(g for g in self.gpus() if g.index == index)

    def events(self, job_id: str) -> list[dict[str, Any]]:
        """The job's history: queued, started, requeued (with why), finished."""
        self._row(job_id)
        # A requeue keeps its failure kind here, even after a later attempt succeeds.
        kinds = {"requeued-infra": "infra", "requeued-user": "user"}
        return [
            {
                "ts": r["ts"],
                "kind": r["kind"],
                "message": r["message"],
                "failure_kind": kinds.get(r["kind"]),
            }
            for r in self.store.events(job_id)
        ]
