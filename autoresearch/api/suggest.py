"""suggest_trials: the proposer's next diffs for a study without running them, claimed per agent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.errors import InvalidInput, NotFound
from autoresearch.api.reading import study_folder
from autoresearch.journal.journal import Journal, StudyState
from autoresearch.report.report import load_state
from autoresearch.study.folder import STUDY_FILE
from autoresearch.study.study import Study, check_runnable, load_study


def suggest_trials(
    study_dir_or_file: str | Path | dict[str, Any],
    n: int = 1,
    prior_jobs: list[str] | None = None,
    claimed_by: str | None = None,
    home: str | Path | None = None,
) -> dict[str, Any]:
    """The proposer's next ``n`` diffs for a study, without running them.

    With a study folder the proposer sees the study's whole history (and LLM costs are
    journaled against its budget); with a study file or dict it proposes from no history.
    ``prior_jobs`` (job ids run by hand) join that history, with their objectives.
    With ``claimed_by`` (who asks: air-mcp passes its caller), each proposal handed out is
    claimed in ``home``'s state database for AIR_CLAIM_S: another agent asking meanwhile gets
    other trials; ``board`` lists the study's claimed trials, who proposed each, and the job
    that ran it and who launched it.
    """
    from autoresearch.loop.loop import build_request
    from autoresearch.proposers import make_proposer, suggest

    if not isinstance(n, int) or not 1 <= n <= 64:
        raise InvalidInput(f"n must be an integer from 1 to 64, got {n!r}", hint="pass n=1..64")
    folder: Path | None = None
    if isinstance(study_dir_or_file, str | Path) and not Path(study_dir_or_file).exists():
        # a study's name, as the other study tools take it (issue 39.7)
        named = study_folder(study_dir_or_file)
        study_dir_or_file = named if named.is_dir() else study_dir_or_file
    if isinstance(study_dir_or_file, str | Path) and Path(study_dir_or_file).is_dir():
        folder = Path(study_dir_or_file).expanduser().resolve()
    if folder is not None and Journal(folder).exists():
        study, state = load_state(folder)
    else:
        source = study_dir_or_file
        if folder is not None:
            if not (folder / STUDY_FILE).exists():
                raise NotFound(f"no study in {folder}", hint="give a study folder or a study file")
            source = folder / STUDY_FILE
        study, state = load_study(source), StudyState()
    if prior_jobs:
        from air_skills.client import Client
        from autoresearch.loop.prior import with_prior

        state = with_prior(state, study, prior_jobs, Client())
    from autoresearch.study import claims

    store, key = None, claims.study_key(folder, study.name)
    if claimed_by is not None:
        from air_skills.client import Client

        store = Client(home).store
    # Ask for more than n when other agents hold claims: some proposals may be theirs.
    held = claims.live_claims(store.conn, key, str(claimed_by)) if store is not None else 0
    proposer = make_proposer(study.proposer)
    code = _code_base(study, state)
    asked = min(64, n + held)
    result = suggest(proposer, build_request(study, state, asked, purpose="suggest", code=code))
    skipped: list[str] = []
    if store is not None:
        result, skipped = _claimed(store, key, study, str(claimed_by), n, result)
        while len(result.proposals) < n and skipped and asked < 64 and not result.stop_reason:
            asked = min(64, 2 * asked + len(skipped))  # skipped ones: ask the proposer for more
            spent = result.events
            result = suggest(proposer, build_request(study, state, asked, "suggest", code=code))
            result.events = spent + result.events  # every LLM call is journaled
            result, skipped = _claimed(store, key, study, str(claimed_by), n, result)
    if folder is not None and Journal(folder).exists():
        journal = Journal(folder)
        for kind, fields in result.events:
            if kind == "llm_call":  # money spent is money spent, loop or not
                journal.append(kind, **fields)
    return {
        "study": study.name,
        "history": len(state.trials),
        "suggestions": [
            {
                "diff": p.diff,
                "config": study.config_for(p.diff),
                "rationale": p.rationale,
                "source": p.source,
                **(
                    {"patch": p.patch, "parent": p.parent, "patch_summary": p.patch_summary}
                    if p.patch or p.parent is not None
                    else {}
                ),
            }
            for p in result.proposals
        ],
        "stop_reason": result.stop_reason,
        "llm_usd": round(sum(f.get("usd", 0.0) for k, f in result.events if k == "llm_call"), 6),
        "notes": [
            f"{k}: {f.get('reason') or f.get('error') or '; '.join(f.get('problems', []))}"
            for k, f in result.events
            if k in ("fallback", "invalid_proposal") or (k == "llm_call" and not f.get("ok"))
        ]
        + [f"skipped a proposal {why}" for why in skipped],
        **(
            {"claimed_by": claimed_by, "board": claims.board(store.conn, key, study.command)}
            if store is not None
            else {}
        ),
    }


def _claimed(
    store: Any, key: str, study: Study, who: str, n: int, result: Any
) -> tuple[Any, list[str]]:
    """``result`` keeping the (at most ``n``) proposals claimed for ``who``; why others not."""
    from autoresearch.study import claims

    offered = [(claims.trial_key(study.config_for(p.diff), p.patch), p) for p in result.proposals]
    taken, skipped = claims.claim(
        store,
        key,
        [(k, study.config_for(p.diff)) for k, p in offered],
        who,
        float(settings.get("AIR_CLAIM_S")),
        n,
        claims.ran_configs(store.conn, study.command),
    )
    result.proposals = [offered[i][1] for i in taken]
    return result, skipped


def _code_base(study: Study, state: StudyState) -> Any:
    """The study's code base: the journaled one, or (no history yet) the tree as it is now."""
    if study.code is None:
        return None
    from air_skills.home import default_home
    from autoresearch.code.code_base import CodeBase

    home = default_home()
    if state.code_base is not None:
        return CodeBase(home, state.code_base)
    if study.base_job:  # the base job's code (its snapshot and patch), not the tree
        from air_skills.client import Client
        from autoresearch.code.code_base import base_job_code

        return CodeBase.take(home, study, base_job_code(Client(), study.base_job))
    return CodeBase.take(home, check_runnable(study))
