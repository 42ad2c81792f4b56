"""The study report: markdown (best config and its diff from the base, a table of trials, the
noise floor, budgets spent) and a PNG of the objective per trial with the best-so-far line."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from air_skills.errors import NotFound
from air_skills.runtime.supervision.stall_words import MARK as STALL_MARK
from autoresearch.journal.best import lowest_seen
from autoresearch.journal.journal import Journal, StudyState, Trial, TrialStatus, replay
from autoresearch.report.cost import Pricing, study_cost, study_throughput, trial_cost, trial_gpus
from autoresearch.report.final_lines import final_lines
from autoresearch.report.report_code import code_lines, value_text
from autoresearch.report.summary import best_fields, best_label, best_trial
from autoresearch.study.folder import PLOT_FILE, REPORT_FILE, loop_alive
from autoresearch.study.study import Study, parse_study

# How each kind of finished trial is drawn (failed trials are drawn apart: no value).
SCATTER_STYLES: dict[str, dict[str, Any]] = {
    "ok": {"c": "tab:blue", "s": 28, "label": "trial"},
    "noise": {"c": "tab:gray", "s": 28, "marker": "s", "label": "baseline runs"},
    "pruned": {"c": "tab:orange", "s": 40, "marker": "x", "label": "pruned (value when stopped)"},
}


def load_state(study_dir: Path | str) -> tuple[Study, StudyState]:
    study_dir = Path(study_dir)
    journal = Journal(study_dir)
    state = replay(journal.read())
    state.warnings += journal.notes(state)
    return study_of(study_dir, state), state


def study_of(study_dir: Path, state: StudyState) -> Study:
    """The study that ``state`` (replayed from ``study_dir``'s journal) holds; NotFound when
    the journal has no events or no study."""
    if not state.events and not state.skipped:
        raise NotFound(
            f"no study journal in {study_dir}",
            hint="give a study folder (default AIR_HOME/studies/<name>/) or a study name",
            study_dir=str(study_dir),
        )
    if not state.study:
        raise NotFound(f"the journal in {study_dir} holds no study", hint="run the study again")
    return parse_study(state.study, "journal study")


def _fmt(value: Any, digits: int = 5) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _diff_text(diff: dict[str, Any]) -> str:
    if not diff:
        return "(base)"
    return ", ".join(f"{k}={_fmt(v, 4)}" for k, v in diff.items())


def best_so_far(study: Study, state: StudyState) -> list[tuple[int, float]]:
    """(trial, best kept value up to it), in trial order, for the plot's step line."""
    kept = {
        t.number: t.value
        for t in state.trials.values()
        if t.decision in ("keep", "baseline") and t.value is not None
    }
    if state.noise_values:
        mean = sum(state.noise_values) / len(state.noise_values)
        kept.update({n: mean for n, t in state.trials.items() if t.decision == "baseline"})
    out: list[tuple[int, float]] = []
    best: float | None = None
    for n in sorted(state.trials):
        v = kept.get(n)
        if v is not None and (best is None or study.objective.better(v, best)):
            best = v
        if best is not None:
            out.append((n, best))
    return out


def plot(study: Study, state: StudyState, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    groups: dict[str, list[Trial]] = {"ok": [], "noise": [], "pruned": [], "failed": []}
    for t in state.ordered():
        if t.status == TrialStatus.SUCCEEDED and t.value is not None:
            groups["noise" if t.is_noise else "ok"].append(t)
        elif t.status == TrialStatus.PRUNED and t.value is not None:
            groups["pruned"].append(t)
        elif t.status == TrialStatus.FAILED:
            groups["failed"].append(t)
    for group, style in SCATTER_STYLES.items():
        if groups[group]:
            ax.scatter(
                [t.number for t in groups[group]],
                [t.value for t in groups[group]],
                zorder=3,
                **style,
            )
    line = best_so_far(study, state)
    if line:
        xs = [n for n, _ in line]
        ys = [v for _, v in line]
        ax.step(xs, ys, where="post", c="tab:green", lw=2, label="best so far (kept)")
        floor = state.noise_floor or 0.0
        if floor > 0:
            ax.fill_between(
                xs,
                [y - floor for y in ys],
                [y + floor for y in ys],
                step="post",
                color="tab:green",
                alpha=0.12,
                label="noise floor",
            )
    if groups["failed"]:
        ymin = ax.get_ylim()[0] if ax.has_data() else 0.0
        ax.scatter(
            [t.number for t in groups["failed"]],
            [ymin] * len(groups["failed"]),
            c="tab:red",
            marker="v",
            s=40,
            label="failed",
            zorder=3,
            clip_on=False,
        )
    ax.set_xlabel("trial")
    ax.set_ylabel(f"{study.objective.metric} ({study.objective.direction})")
    ax.set_title(f"{study.name}: objective per trial")
    ax.grid(alpha=0.3)
    if ax.has_data():
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _state_line(study_dir: Path, state: StudyState) -> str:
    if state.stopped:
        return f"stopped: {state.stopped.get('reason')}"
    if loop_alive(study_dir):
        return "running"
    return "interrupted (no loop is running; resume with `autoresearch run DIR --resume`)"


def render_markdown(study_dir: Path, study: Study, state: StudyState, plot_name: str) -> str:
    obj = study.objective
    trials = state.ordered()
    counts = {s: sum(1 for t in trials if t.status == s) for s in TrialStatus}
    b = study.budget
    now = time.time()
    budget = [f"trials {len(trials)}/{b.trials}"]
    wall = state.wall_s_now(now) / 60 if loop_alive(study_dir) else state.wall_s / 60
    budget.append(
        f"wall time {wall:.1f}" + (f"/{b.wall_time_min:g}" if b.wall_time_min else "") + " min"
    )
    budget.append(
        f"GPU-hours {state.gpu_hours(now):.3f}" + (f"/{b.gpu_hours:g}" if b.gpu_hours else "")
    )
    if study.proposer.type == "llm" or state.llm_calls:
        budget.append(
            f"LLM ${state.llm_usd:.4f}/${b.llm_usd:g} ({state.llm_calls} calls,"
            f" {state.llm_input_tokens} in / {state.llm_output_tokens} out tokens)"
        )
    proposer = study.proposer.type
    if study.proposer.type == "llm":
        proposer += f" ({study.proposer.provider}, {study.proposer.resolved_model})"
    lines = [
        f"# Study `{study.name}`",
        "",
        f"- **State:** {_state_line(study_dir, state)}",
        f"- **Objective:** `{obj.metric}` ({obj.direction})"
        + (f", curve `{obj.step_metric}`" if obj.step_metric else ""),
        f"- **Proposer:** {proposer}",
        f"- **Trials:** {len(trials)} ("
        + ", ".join(f"{counts[s]} {s.value.lower()}" for s in TrialStatus if counts[s])
        + ")",
        f"- **Budget spent:** {' · '.join(budget)}",
        _cost_line(state, now),
        _throughput_line(study, state, now, loop_alive(study_dir)),
    ]
    stalled = [str(t.number) for t in trials if t.failure and STALL_MARK in t.failure]
    if stalled:
        lines.append(
            f"- **Stalled:** {len(stalled)} (trials {', '.join(stalled)}: stopped after no"
            " progress; their stacks are in stacks.txt in each job's folder)"
        )
    if study.noise.repeats:
        if state.noise_floor is not None and not state.noise_values:
            lines.append("- **Noise floor:** none: no run of the base config succeeded")
        elif state.noise_floor is not None:
            lines.append(
                f"- **Noise floor:** {_fmt(state.noise_floor)} ({study.noise.sigmas:g} x std"
                f" {_fmt(state.noise_std)} over {len(state.noise_values)} baseline runs:"
                f" {', '.join(_fmt(v) for v in state.noise_values)}); a trial is kept only when"
                " it beats the best by more"
            )
        else:
            lines.append("- **Noise floor:** not measured yet")
    else:
        lines.append("- **Noise floor:** not measured (noise.repeats = 0)")
    lines.append(f"- **Acceptance rule:** {study.accept} (study key `accept`)")
    lines += ["", "## Best", ""]
    best = best_trial(state)
    if best is None:
        lines.append("No trial has succeeded yet.")
    else:
        baseline = next((t for t in trials if t.decision == "baseline"), None)
        base_value = (
            sum(state.noise_values) / len(state.noise_values)
            if state.noise_values
            else (baseline.value if baseline else None)
        )
        change = ""
        if base_value and best is not baseline and best.value is not None:
            pct = 100 * (best.value - base_value) / abs(base_value)
            change = f" (baseline {_fmt(base_value)}, {pct:+.1f}%)"
        lines.append(
            f"Trial {best.number} ({best.source}): **{obj.metric} = {best_label(state, best)}**"
            f"{change} · job `{best.job_id}` · MLflow run `{best.run_id}`"
        )
        low = lowest_seen(trials, state.best_trial, obj.direction)
        if low is not None:  # named apart: a lower single run is not the best (issue 39.5)
            lines.append(
                f"\nLowest single value seen (lowest_seen, not the best): trial {low['trial']},"
                f" {_fmt(low['value'])}: {low['why_not_kept']}"
            )
        if best.rationale and best.source not in ("baseline",):
            lines.append(f"\n> {best.rationale}")
        lines += ["", "Diff from the base config:", ""]
        if best.diff:
            lines += ["| key | base | best |", "|---|---|---|"]
            for k, v in best.diff.items():
                base = _fmt(study.base_config[k]) if k in study.base_config else "(script default)"
                lines.append(f"| `{k}` | {base} | {_fmt(v)} |")
        else:
            lines.append("(none: the base config is the best)")
        lines += ["", "Full config:", "", "```json", json.dumps(best.config, indent=2), "```"]
    if state.steering.log:  # steer_study's requests, in the order they came
        lines += ["", "## Steering", ""]
        lines += [f"- {state.steering.line(e)}" for e in state.steering.log]
    lines += final_lines(study, state)
    lines += ["", f"![objective per trial]({plot_name})", "", "## Trials", ""]
    lines += [
        f"| # | source | diff | status | {obj.metric} | steps | decision | minutes | cost $"
        " | note |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    pricing = Pricing()
    for t in trials:
        minutes = f"{(t.ended_at - t.started_at) / 60:.2f}" if t.ended_at and t.started_at else ""
        note = (t.failure or t.rationale or "").replace("|", "/").replace("\n", " ")[:160]
        lines.append(
            f"| {t.number} | {t.source} | {_diff_text(t.diff)} | {t.status.value} |"
            f" {value_text(t)} | {_fmt(t.steps)} | {_rule(t)} | {minutes} |"
            f" {trial_cost(t, now, pricing)['usd']:.4f} | {note} |"
        )
    lines += code_lines(study, state)
    if state.invalid_proposals or state.fallbacks or state.llm_errors:
        lines += [
            "",
            "## Proposer",
            "",
            f"- invalid proposals: {state.invalid_proposals}; replaced by the fallback proposer:"
            f" {state.fallbacks}; failed LLM calls: {state.llm_errors}",
        ]
    if state.checks:  # the study's checks of its own results (loop/waste.py)
        lines += ["", "## Checks", ""]
        lines += [f"- [{c['code']}] {c['message']} Fix: {c['fix']}" for c in state.checks]
    if state.warnings or state.last_error:
        lines += ["", "## Warnings", ""]
        lines += [f"- {w}" for w in dict.fromkeys(state.warnings)]
        if state.last_error:
            lines.append(
                f"- error [{state.last_error.get('code')}]: {state.last_error.get('message')}"
            )
    lines += ["", f"Journal: `{Path(study_dir) / 'journal.jsonl'}`", ""]
    return "\n".join(lines)


def _rule(t: Any) -> str:
    """The decision, with the acceptance rule that made it (keep · k-sigma(2))."""
    return f"{t.decision} · {t.rule}" if t.decision and t.rule else t.decision or ""


def _cost_line(state: StudyState, now: float) -> str:
    c = study_cost(state, now)
    per = (
        f"; ${c['usd_per_improvement']:.4f} per kept improvement ({c['kept_improvements']} kept)"
        if c["usd_per_improvement"] is not None
        else "; no improvement kept yet"
    )
    return (
        f"- **Cost:** ${c['usd']:.4f} (GPU ${c['gpu_usd']:.4f} for {c['gpu_hours']:.3f}"
        f" GPU-hours, LLM ${c['llm_usd']:.4f}){per}"
    )


def _throughput_line(study: Any, state: StudyState, now: float, alive: bool) -> str:
    """Trials per GPU-hour of the study's GPUs and how busy its trials kept them."""
    slots = study.budget.concurrency * trial_gpus(study.gpus_per_trial, state)
    wall_s = state.wall_s_now(now) if alive else state.wall_s
    t = study_throughput(state, wall_s, slots, now)
    if t["trials_per_gpu_hour"] is None:
        return "- **Throughput:** no GPU time (trials on CPU slots)"
    return (
        f"- **Throughput:** {t['trials_per_gpu_hour']:.2f} trials per GPU-hour of the study's"
        f" {slots} GPU(s); trials ran {100 * t['gpu_busy']:.0f}% of that GPU time"
    )


def write_report(study_dir: Path | str) -> dict[str, Any]:
    """Write report.md and objective.png into the study folder; returns their paths."""
    study_dir = Path(study_dir).resolve()
    study, state = load_state(study_dir)
    png = plot(study, state, study_dir / PLOT_FILE)
    md = study_dir / REPORT_FILE
    md.write_text(render_markdown(study_dir, study, state, png.name))
    best = best_trial(state)
    return {
        "report": str(md),
        "plot": str(png),
        "best": None if best is None else {**best_fields(state, best), "config": best.config},
    }
