"""The LLM proposer's prompt (notes, space, noise floor, budget left, a compact history) and
the schema of the tool it must answer through."""

from __future__ import annotations

import json
from functools import cmp_to_key
from typing import Any

import prompts
from air_skills.vocabulary import better
from autoresearch.journal.journal import Trial, TrialStatus
from autoresearch.proposers.base import ProposalRequest, short_json
from autoresearch.proposers.code_prompt import code_section, patch_note
from autoresearch.spec.study_schema import Study
from autoresearch.spec.study_sections import FloatParam, IntParam

TOOL_NAME = "propose_trials"
TOOL_DESCRIPTION = (
    "Submit the next trials to run, each as a diff from the base config with a short rationale."
)
MAX_HISTORY_ROWS = 80
CODE_PROPERTIES = {
    "patch": {
        "type": "string",
        "description": "a unified diff of editable files (git diff form); omit for config only",
    },
    "parent": {
        "type": "integer",
        "description": "the trial whose code the patch applies to; omit for the base code",
    },
}


def _num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.5g}"
    return json.dumps(value) if not isinstance(value, str) else value


def describe_space(study: Study) -> str:
    lines = []
    for key, p in study.search_space.items():
        base = f" (base: {_num(study.base_config[key])})" if key in study.base_config else ""
        if isinstance(p, FloatParam):
            scale = ", log scale" if p.log else ""
            lines.append(f"- {key}: number in [{_num(p.low)}, {_num(p.high)}]{scale}{base}")
        elif isinstance(p, IntParam):
            scale = ", log scale" if p.log else ""
            lines.append(f"- {key}: integer in [{p.low}, {p.high}]{scale}{base}")
        else:
            lines.append(f"- {key}: one of {json.dumps(p.values)}{base}")
    return "\n".join(lines)


def curve_summary(curve: list[list[float]], points: int = 5) -> str:
    if not curve:
        return ""
    if len(curve) <= points:
        chosen = curve
    else:
        idx = sorted({round(i * (len(curve) - 1) / (points - 1)) for i in range(points)})
        chosen = [curve[i] for i in idx]
    return " ".join(f"{_num(v)}@{int(s)}" for s, v in chosen)


def history_table(request: ProposalRequest) -> str:
    study = request.study
    trials = list(request.trials)
    if not trials:
        return "(no trials yet)"
    omitted = 0
    if len(trials) > MAX_HISTORY_ROWS:
        scored = [t for t in trials if t.value is not None and t.status == TrialStatus.SUCCEEDED]
        best = sorted(scored, key=_best_first(study))[:30]
        recent = trials[-(MAX_HISTORY_ROWS - len(best)) :]
        keep = {t.number for t in best} | {t.number for t in recent} | {0}
        omitted = len(trials) - len(keep)
        trials = [t for t in trials if t.number in keep]
    metric = study.objective.metric
    curve_name = study.objective.curve_metric
    code = "code | " if study.code is not None else ""
    rows = [
        f"| # | diff from base | {code}status | {metric} | {curve_name} curve (value@step)"
        " | note |",
        "|---|---|---|---|---|---|" + ("---|" if code else ""),
    ]
    for t in trials:
        mark = "*" if t.number == request.best_trial else ""
        diff = "(base)" if not t.diff else short_json(t.diff, 160)
        value = _num(t.value) if t.value is not None else ""
        note = []
        if t.source == "noise":
            note.append("noise repeat of the base config")
        if t.source == "confirm":
            note.append(f"confirmation run of #{t.confirms}")
        if t.decision in ("keep", "discard"):
            note.append(t.decision)
        if t.failure:
            note.append(t.failure[:140].replace("|", "/").replace("\n", " "))
        patch = f"{patch_note(t) or '-'} | " if code else ""
        rows.append(
            f"| {t.number}{mark} | {diff} | {patch}{t.status.value} | {value} | "
            f"{curve_summary(t.curve)} | {'; '.join(note)} |"
        )
    if omitted:
        rows.append(f"({omitted} middling trials omitted)")
    return "\n".join(rows)


def describe_noise(request: ProposalRequest) -> str:
    study = request.study
    if request.noise_floor is not None and study.noise.repeats:
        return (
            f"{_num(request.noise_floor)} ({_num(study.noise.sigmas)} standard deviations of "
            f"{study.noise.repeats + 1} runs of the base config with other seeds): a trial is kept "
            "as the new best only when it beats the best by more than this."
        )
    if study.noise.repeats:
        return "being measured: the base config runs again with other seeds."
    return "not measured (noise.repeats is 0): small differences may be luck."


def describe_budget(request: ProposalRequest) -> str:
    left = request.budget_left
    if not left:
        return "(not given)"
    return "; ".join(f"{k}: {v}" for k, v in left.items())


def render_prompts(request: ProposalRequest) -> tuple[str, str]:
    study = request.study
    obj = study.objective
    objective = f"{obj.metric}, to {obj.direction} (the last value a trial logs)"
    if obj.step_metric:
        objective += f"; its learning curve is read from {obj.step_metric}"
    system = prompts.render("proposer_system")
    user = prompts.render(
        "proposer_user",
        name=study.name,
        program=study.program.strip() or "(none given)",
        objective=objective,
        space=describe_space(study),
        base_config=json.dumps(study.base_config, indent=1, sort_keys=True),
        noise=describe_noise(request),
        budget=describe_budget(request),
        n_trials=len(request.trials),
        history=history_table(request),
        n=request.n,
        code=code_section(request.code, request.trials, request.best_trial),
    )
    if request.notes or request.pins:  # steer_study: what the study's owner asks of the search
        lines = [f"- {note}" for note in request.notes[-10:]]
        lines += [f"- {k} is pinned to {v!r}: keep it" for k, v in request.pins.items()]
        user += "\n\nNotes from the study's owner (steer_study):\n" + "\n".join(lines)
    return system, user


def tool_schema(study: Study, n: int, code: bool = False) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for key, p in study.search_space.items():
        if isinstance(p, FloatParam):
            props[key] = {"type": "number", "minimum": p.low, "maximum": p.high}
        elif isinstance(p, IntParam):
            props[key] = {"type": "integer", "minimum": p.low, "maximum": p.high}
        else:
            props[key] = {"enum": list(p.values)}
    return {
        "type": "object",
        "properties": {
            "trials": {
                "type": "array",
                "minItems": n,
                "maxItems": n,
                "items": {
                    "type": "object",
                    "properties": {
                        "diff": {
                            "type": "object",
                            "properties": props,
                            "additionalProperties": False,
                        },
                        "rationale": {"type": "string"},
                        **(CODE_PROPERTIES if code else {}),
                    },
                    "required": ["diff", "rationale"],
                },
            }
        },
        "required": ["trials"],
    }


def replace_n(tool: dict[str, Any], n: int) -> dict[str, Any]:
    out = json.loads(json.dumps(tool))
    out["properties"]["trials"]["minItems"] = n
    out["properties"]["trials"]["maxItems"] = n
    return out


def _best_first(study: Study) -> Any:
    """A sort key that puts the best objective values first (ties keep their order)."""
    direction = study.objective.direction

    def compare(a: Trial, b: Trial) -> int:
        va, vb = a.value or 0.0, b.value or 0.0
        return -1 if better(va, vb, direction) else int(better(vb, va, direction))

    return cmp_to_key(compare)
