"""Claims on proposed trials, for studies that several agents share (issue 29).

``suggest_trials`` claims each proposal it hands out for a while (AIR_CLAIM_S, 10 min): another
agent asking for the same study in that time is not given it again, so two agents asking at once
get different trials, and a proposal whose config a job already runs or ran (the study's
command) is not handed out either. A claim names who proposed it; ``board`` joins a study's
claims with the jobs that ran their configs (who ran each, its status). Claims live in the state
database's ``trial_claims`` table, written in one transaction per call (racing callers cannot
both claim one trial).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

BOARD_JOBS = 2000  # newest jobs since the study's first claim that a board compares configs with


def study_key(folder: Path | None, name: str) -> str:
    """A study as claims name it: its folder, else (a study file alone) its name."""
    return str(folder) if folder is not None else f"name:{name}"


def trial_key(config: Mapping[str, Any], patch: str | None) -> str:
    """What a proposal runs: its whole config and its patch, hashed."""
    text = json.dumps({"config": config, "patch": patch}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def claim(
    store: Any,
    study: str,
    proposals: Sequence[tuple[str, Mapping[str, Any]]],
    who: str,
    ttl_s: float,
    want: int,
    ran: Mapping[str, tuple[str, str | None, str]] | None = None,
) -> tuple[list[int], list[str]]:
    """Claim up to ``want`` of ``proposals`` ((trial key, config), in the proposer's order) for
    ``who``: (the indexes claimed, why others were skipped). A proposal another agent holds an
    unexpired claim on is skipped, and one whose config a job in ``ran`` (``ran_configs``)
    already runs or ran; ``who``'s own claims are renewed."""
    now = time.time()
    taken: list[int] = []
    skipped: list[str] = []
    with store.tx() as conn:  # claims are kept once expired: the board says who proposed
        for i, (key, config) in enumerate(proposals):
            if len(taken) == want:
                break
            done = already_run(ran or {}, config)
            if done is not None:
                skipped.append(done)
                continue
            row = conn.execute(
                "SELECT claimed_by, expires_at FROM trial_claims WHERE study=? AND trial_key=?",
                (study, key),
            ).fetchone()
            if row is not None and row[0] != who and row[1] >= now:
                until = time.strftime("%H:%M:%S", time.localtime(row[1]))
                skipped.append(f"claimed by {row[0]} until {until}")
                continue
            conn.execute(
                "INSERT INTO trial_claims (study, trial_key, config, claimed_by, claimed_at,"
                " expires_at) VALUES (?,?,?,?,?,?) ON CONFLICT(study, trial_key) DO UPDATE SET"
                " claimed_by=excluded.claimed_by, claimed_at=excluded.claimed_at,"
                " expires_at=excluded.expires_at",
                (study, key, json.dumps(config, sort_keys=True), who, now, now + ttl_s),
            )
            taken.append(i)
    return taken, skipped


def live_claims(conn: Any, study: str, who: str) -> int:
    """How many unexpired claims other agents hold on ``study``'s trials."""
    row = conn.execute(
        "SELECT count(*) FROM trial_claims WHERE study=? AND claimed_by != ? AND expires_at >= ?",
        (study, who, time.time()),
    ).fetchone()
    return int(row[0])


def ran_configs(
    conn: Any, command: Sequence[str], since: float = 0.0
) -> dict[str, tuple[str, str | None, str]]:
    """{canonical config: (job id, launched_by, status)} of the newest BOARD_JOBS jobs created
    since ``since`` that ran ``command``; a success wins over a failed try of the same config."""
    jobs = conn.execute(
        "SELECT job_id, launched_by, status, json_extract(spec, '$.config') FROM jobs"
        " WHERE created_at >= ? AND json_extract(spec, '$.command') = ?"
        " ORDER BY seq DESC LIMIT ?",
        (since, json.dumps(list(command), separators=(",", ":")), BOARD_JOBS),
    ).fetchall()
    ran: dict[str, tuple[str, str | None, str]] = {}
    for job_id, launched_by, status, config in jobs:
        canon = json.dumps(json.loads(config) if config else {}, sort_keys=True)
        if canon not in ran or status == "SUCCEEDED":
            ran[canon] = (job_id, launched_by, status)
    return ran


def already_run(
    ran: Mapping[str, tuple[str, str | None, str]], config: Mapping[str, Any]
) -> str | None:
    """Why a proposal is not handed out: its config is queued, running or done as a job."""
    found = ran.get(json.dumps(config, sort_keys=True))
    if found is None or found[2] not in ("QUEUED", "RUNNING", "SUCCEEDED"):
        return None
    job_id, who, status = found
    return f"already run as {job_id} ({status}, launched by {who or 'the local user'})"


def board(conn: Any, study: str, command: Sequence[str], limit: int = 50) -> list[dict[str, Any]]:
    """The study's claimed trials, newest first: config, who proposed it, and the job that ran
    that config (job id, who launched it, status) when there is one."""
    claims = conn.execute(
        "SELECT config, claimed_by, claimed_at, expires_at FROM trial_claims WHERE study=?"
        " ORDER BY claimed_at DESC LIMIT ?",
        (study, limit),
    ).fetchall()
    if not claims:
        return []
    ran = ran_configs(conn, command, min(c[2] for c in claims))
    out = []
    for config, proposed_by, claimed_at, expires_at in claims:
        row: dict[str, Any] = {
            "config": json.loads(config),
            "proposed_by": proposed_by,
            "claimed_at": claimed_at,
        }
        if config in ran:
            job_id, launched_by, status = ran[config]
            row.update(job_id=job_id, ran_by=launched_by, status=status)
        else:
            row["claimed_until"] = expires_at
        out.append(row)
    return out
