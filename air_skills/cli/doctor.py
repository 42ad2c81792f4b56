"""`air doctor`: reads the pool, the recent infra events and the tracking store, then reports."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from air_skills.gpu.doctor import doctor_report
from air_skills.gpu.providers import provider
from air_skills.runtime.code import quarantine
from air_skills.runtime.containers import engine_check
from air_skills.runtime.execution import sandbox
from air_skills.runtime.launch.orphans import sweep_orphans
from air_skills.runtime.results.outcomes import max_infra_retries
from air_skills.runtime.store.rebuild import records_check
from air_skills.tracking.store_check import artifacts_check, check_store

if TYPE_CHECKING:
    from air_skills.client import Client

HISTORY_S = 24 * 3600  # the report looks back one day for restarts and cordons


def run_doctor(client: Client, deep: bool = False) -> dict[str, Any]:
    """The doctor's report for this machine (see ``air_skills.gpu.doctor``)."""
    since = time.time() - HISTORY_S
    # The doctor looks everywhere: half-created jobs of crashed launches, stale env files.
    sweep_orphans(client.runtime, force=True, thorough=True)
    report = doctor_report(
        provider(),
        client.gpus(),
        client.home,
        requeued_infra=client.store.events_since("requeued-infra", since),
        cordons=client.store.events_since("cordon", since),
        max_infra_retries=max_infra_retries(),
        tracking=check_store(client.home),
        deep=deep,
    )
    report = _with_check(report, records_check(client.store))
    report = _with_check(report, engine_check.doctor_check(client.home))
    report = _with_check(report, sandbox.doctor_check())
    report = _with_check(report, sandbox.uid_check())
    report = _with_check(report, quarantine.doctor_check(client.home))
    report = _with_check(report, artifacts_check(client.home))
    from air_skills.backends.slurm.doctor import doctor_check as slurm_check

    return _with_check(report, slurm_check(client.home, client.store.setting("backend")))


def _with_check(report: dict[str, Any], check: dict[str, str]) -> dict[str, Any]:
    """The report with one more check (its status the worst of all)."""
    report["checks"].append(check)
    rank = {"ok": 0, "warn": 1, "fail": 2}
    report["status"] = max(report["status"], check["status"], key=rank.__getitem__)
    return report


def rebuild_records(dry_run: bool, as_json: bool) -> None:
    """`air doctor --rebuild [--dry-run]`: through Client.rebuild, which opens no store."""
    from air_skills.cli.output import emit_json, out, say
    from air_skills.client import Client

    result = Client.rebuild(dry_run=dry_run)
    if as_json:
        emit_json(result)
        return
    would = "would " if dry_run else ""
    if result["other_home_db"]:
        where = result["moved_aside"] or "aside"
        say(out, f"air.db is another home's: {would}move it to {where}, then a new one")
    rebuilt = result["rebuilt"]
    say(out, f"{would}record {len(rebuilt)} job folders as FAILED (infra, outcome unknown)"
        + (": " + ", ".join(rebuilt) if rebuilt else ""))  # fmt: skip
    for item in result["skipped"]:
        say(out, f"skip {item['job_id']}: {item['reason']}")
    index = result.get("results_index") or {}
    if index:
        say(out, f"results index: {would}read {index['jobs']} tracked jobs again from MLflow"
            + ("" if dry_run else f" ({index['indexed']} indexed)"))  # fmt: skip
    if dry_run:
        say(out, "nothing was changed: run `air doctor --rebuild` to do it")
