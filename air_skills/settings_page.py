"""docs/configuration.md, written from the settings table (``python -m air_skills.settings``
prints it) in Markdown; stdlib only. It takes the table as an argument: air_skills/settings.py
imports this module, never the other way round."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol


class Documented(Protocol):
    """What the page shows of a setting (air_skills.settings.Setting has it)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def default(self) -> Any: ...
    @property
    def meaning(self) -> str: ...
    @property
    def form(self) -> str: ...
    @property
    def default_text(self) -> str: ...


def default_text(s: Documented) -> str:
    """A setting's default as the docs (and a bad value's hint) say it."""
    if s.default_text:
        return s.default_text
    return f"`{s.default:g}`" if isinstance(s.default, float) else f"`{s.default}`"


def markdown_table(table: Iterable[Documented]) -> str:
    """The settings as a Markdown table (docs/configuration.md holds it)."""
    rows = [
        "| variable | type | default | meaning | valid values |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in table:
        form = s.form or "any text"
        rows.append(f"| `{s.name}` | {s.kind} | {default_text(s)} | {s.meaning} | {form} |")
    return "\n".join(rows)


_PAGE_HEAD = """\
# Configuration

Every environment variable that AIR Skills reads, with its default and meaning. Each is parsed
and checked in one place, `air_skills/settings.py`; this page is generated from it
(`python -m air_skills.settings > docs/configuration.md`), and a test fails when the code reads a
variable that is not listed here.

A bad value of a checked variable is a clean error that names the variable, the value and the
valid form, for example:

```
$ AIR_MAX_INFRA_RETRIES=three air ls
[invalid-input] AIR_MAX_INFRA_RETRIES='three' is not a whole number >= 0
Next: set AIR_MAX_INFRA_RETRIES to a whole number >= 0, or unset it (default: `3`)
```

An empty value counts as unset. The supervisor of a job reads these variables from the
environment the job was launched from.

## Variables you set
"""

_PAGE_JOB = """
## Variables every job receives

The local supervisor and the Ray entrypoint set these for the job's command (with
`CUDA_VISIBLE_DEVICES` and the MLflow variables `MLFLOW_TRACKING_URI`, `MLFLOW_RUN_ID` and
`MLFLOW_EXPERIMENT_ID`). The toolkit writes them and never reads them back.

| variable | meaning |
| --- | --- |
"""

# What a job receives beside the variables (issue 38): its config as flags, the MLflow shim.
_PAGE_TAIL = """
Beside these, a job's config also arrives as flags after its command's own arguments unless
its `config_as` (spec field, study key, `air launch --config-as`) is `file`: `--key=value` per
key, `--key` for true (nothing for false), `--key v1 v2` for a list (`both`, the default, gives
the file and the flags; `args` the flags only). A tracked job's `PYTHONPATH` starts with air's
`job_site` folder, whose `sitecustomize` keeps `mlflow.set_experiment("name")` working: the
run stays in the experiment air made (`--experiment` chooses it) and the name asked for is the
run's tag `air.asked_experiment`; every top-level `mlflow.start_run()` resumes the job's run.
A sandboxed job without `WANDB_API_KEY` gets `WANDB_MODE=offline` and `WANDB_DIR` (its folder).
Every experiment air creates keeps its artifacts under `AIR_HOME/mlartifacts/` (a tracking
server: the server's root), whatever folder air runs from.

A sandboxed job's caches (the README's sandbox section): `XDG_CACHE_HOME`, `HF_HOME`,
`TORCH_HOME`, `PIP_CACHE_DIR`, `TRITON_CACHE_DIR`, `TORCHINDUCTOR_CACHE_DIR` (and
`HF_HUB_CACHE`, `HF_DATASETS_CACHE` where the launch sets them) name the user's own folders
(the launch's values, else each tool's default: `~/.cache/...`, Triton's `~/.triton/cache`;
`AIR_SANDBOX_CACHE` names another root) for the user's own code: a plain launch, a config
study. A code-editing trial and the evaluator get `/tmp/air-cache/<tool>` instead: a private
folder of links to what the user's holds, which they read and never write. `$HF_HOME/token`,
`stored_tokens`, `HF_TOKEN_PATH`, pip's config and `~/.netrc` are never readable in a job;
`HF_TOKEN` in a spec's `env` grants a token.

## Study keys of this release

A study file's keys are described in full, with their defaults, in `prompts/study_schema.md`
(what `autoresearch` checks a study against). Those added with the held-out split and the
researcher's own script: `config_as` (`file` | `args` | `both`), `writable` (folders under
`AIR_DATA_ROOTS` that sandboxed trials may write), `stop_after_same_failures` (stop once N
trials failed alike and none succeeded; 0: never), `accept` (`noise-floor` | `k-sigma(k)` |
`paired-test(alpha)`), `final` (`{top_k, seeds}` or `false`: the final re-evaluation, apart
from `budget.trials`) and `objective.holdout` (a metric name, or `{metric, command, data}`;
it raises `noise.repeats` to at least 2). `autoresearch run` and `autoresearch demo` exit 3
when the study ran and failed. Many studies in one process: `autoresearch host run | add | ls
| stop` (the README's "Many studies on one host"), its folder `AIR_HOME/host/`; while it
runs, `start_study` (MCP and Python) hands new studies to it (`AIR_STUDY_HOST`).
"""


def markdown_page(table: Iterable[Documented], job_env: Mapping[str, str]) -> str:
    """docs/configuration.md, whole: the settings ``table`` and the variables every job gets."""
    job = "\n".join(f"| `{name}` | {meaning} |" for name, meaning in job_env.items())
    return _PAGE_HEAD + "\n" + markdown_table(table) + "\n" + _PAGE_JOB + job + "\n" + _PAGE_TAIL
