"""The table of every AIR_* variable (kind, default, meaning, valid form); what a job receives."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Setting:
    """One variable: how to parse it, its default, what it means and what a valid value is."""

    name: str
    kind: str  # int | float | str | path
    default: Any  # None: unset (the meaning says what that does)
    meaning: str
    form: str = ""  # the valid form, as in "is not {form}"; "" for any text
    valid: Callable[[Any], bool] | None = None
    # strict: a bad value is an error (check_all). Lenient ones fall back to their default,
    # and the code that uses them reports the problem (a GPU note, a doctor check).
    strict: bool = True
    default_text: str = ""  # the default as the docs say it, when it is not a plain value


def _at_least(low: float) -> Callable[[Any], bool]:
    return lambda v: v >= low  # NaN compares False: refused


def _positive(v: float) -> bool:
    return v > 0 and not math.isinf(v)


TABLE = (
    # --- where state lives ----------------------------------------------------------------
    Setting(
        "AIR_HOME", "path", None,
        "the folder of the state store, the job folders and the default MLflow store",
        default_text="the platform's user data dir (e.g. ~/.local/share/air-skills)",
    ),
    Setting(
        "AIR_PROJECT", "str", None,
        "the project (for quotas) of a job whose spec names none",
        default_text="`default`",
    ),
    Setting(
        "AIR_DEDUP", "str", "identities",
        "which launches are refused as a `duplicate` when the same experiment (spec, code, config,"
        " seed included) is queued, running or done (`allow_duplicate` overrides it):"
        " `identities` checks launches by an air-mcp token and launch_jobs/suggest_trials,"
        " `always` every launch, `off` none",
        "`identities`, `always` or `off`", lambda v: v in ("identities", "always", "off"),
    ),
    Setting(
        "AIR_DEDUP_NEAR", "float", 0.05,
        "a launch whose config differs from a queued, running or done job's only in numbers,"
        " each within this relative distance, is warned about (the closest job named)",
        "a number >= 0", _at_least(0),
    ),
    Setting(
        "AIR_CLAIM_S", "float", 600.0,
        "seconds a trial that suggest_trials handed out stays claimed by the agent that asked:"
        " another agent asking for the same study meanwhile gets other trials",
        "a number of seconds > 0", _positive,
    ),
    Setting(
        "AIR_STUDY_HOST", "str", "auto",
        "where start_study (MCP and Python) runs a new study in the background: `auto` as a"
        " thread of the home's study host when one runs (`autoresearch host run`, AIR_HOME/host),"
        " else as a process of its own; `off` always a process of its own. `autoresearch run`"
        " and a resumed study are always a process",
        "`auto` or `off`", lambda v: v in ("auto", "off"),
    ),
    Setting(
        "AIR_DATA_ROOTS", "str", None,
        "the folders that data inputs may come from, separated by `os.pathsep` (`:`)",
        default_text="unset: every data input is refused",
    ),
    Setting(
        "AIR_SANDBOX", "str", "auto",
        "whether local jobs run in a bubblewrap sandbox (a job's `sandbox` overrides it): `auto`"
        " when one can be made, `on` refuses a launch without one, `off` runs jobs as the user",
        "`auto`, `on` or `off`", lambda v: v in ("auto", "on", "off"),
    ),
    Setting(
        "AIR_BWRAP", "str", "bwrap",
        "the bubblewrap program that sandboxes jobs: a name looked up on PATH, or a path",
    ),
    Setting(
        "AIR_SANDBOX_DEV_ROOT", "str", "/dev",
        "the folder of GPU device nodes a sandboxed job's /dev is made from: where it holds"
        " `nvidiaN` nodes, a job sees only its own GPUs' nodes and the control nodes",
    ),
    Setting(
        "AIR_SANDBOX_AHEAD", "str", "on",
        "whether an idle supervisor makes the next job's sandbox before the job is known"
        " (bwrap's start off the launch's path): `on`, or `off` to make each when its job starts",
        "`on` or `off`", lambda v: v in ("on", "off"),
    ),
    Setting(
        "AIR_SANDBOX_UID", "int", None,
        "where air runs as root: the unprivileged host uid a sandboxed job runs as (its group:"
        " the uid's own), so that it cannot read root's files or open the disk; its folder and"
        " `writable` folders are handed to it, and root's cache folders shared with it by an ACL"
        " (read-write for the user's own code), so it should be a uid no other process runs as:"
        " `make install`, as root, makes the system user `air-sandbox` for it (`air doctor`"
        " warns where jobs run as 65534, `nobody`). Ignored where air runs as a user (the job is"
        " that user)",
        "a uid 1-4294967294", lambda v: 1 <= v <= 4294967294,
        default_text="the uid of the user `air-sandbox` where it exists, else `65534` (`nobody`)",
    ),
    Setting(
        "AIR_SANDBOX_CACHE", "path", None,
        "the cache root sandboxed jobs share (their XDG_CACHE_HOME; HF_HOME, TORCH_HOME,"
        " PIP_CACHE_DIR, TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR below it unless the launch"
        " names them; HF_HUB_CACHE, HF_DATASETS_CACHE where named): read-write, at their own"
        " paths, for the user's own code (a folder missing is made; one that cannot be made or"
        " shared falls back to $AIR_HOME/cache, and the job's log says so); read-only for"
        " code-editing trials and evaluators, whose variables point at private folders in"
        " their /tmp seeded with links to what the user's hold",
        default_text="unset: the user's own (XDG_CACHE_HOME or ~/.cache; Triton's"
        " ~/.triton/cache)",
    ),
    Setting(
        "AIR_SANDBOX_NETWORK", "str", "own",
        "the network of a sandboxed job that may use one (`network: true`): `own`, a namespace"
        " of its own with outbound access through slirp4netns, where the host's loopback"
        " services (the page, air-mcp, MLflow, a Ray head) are out of reach; `host` grants it"
        " the host's network, loopback included (as before issue 37)",
        "`own` or `host`", lambda v: v in ("own", "host"),
    ),
    Setting(
        "AIR_SLIRP4NETNS", "str", "slirp4netns",
        "the user-mode network stack that gives a sandboxed job outbound network in its own"
        " namespace (the host's loopback stays out of reach): a name on PATH, or a path;"
        " missing, a job has loopback only",
    ),
    Setting(
        "AIR_DATA_RECHECK_MAX_MB", "float", 256.0,
        "MiB of data input content the end-of-job re-check may read (all inputs together);"
        " past it a changed input is reported from its size and mtime, not read",
        "a number of MiB >= 0", _at_least(0),
    ),
    Setting(
        "AIR_DATA_RECHECK_MAX_S", "float", 2.0,
        "seconds the end-of-job re-check of data inputs may take; past them it stops as above",
        "a number of seconds >= 0", _at_least(0),
    ),
    Setting(
        "AIR_JOB_DISK_GB", "float", None,
        "GB a job's folder (checkpoints, outputs, logs, its relayed MLflow store) may hold, as"
        " allocated blocks (a sparse file counts what it holds), polled by its supervisor: past"
        " it the job is stopped and FAILED with `disk: wrote past its cap`; a spec's `disk_gb`"
        " wins. Its private /tmp is a tmpfs of this size too",
        "a number of GB > 0", _positive, default_text="unset: no cap (/tmp: half the memory)",
    ),
    Setting(
        "AIR_DISK_RESERVE_MB", "float", 512.0,
        "MB air keeps free for its own state on the disk that holds AIR_HOME: a launch is"
        " refused `[disk-full]` below it (with what `air gc` would free)",
        "a number of MB >= 0", _at_least(0),
    ),
    # --- GPUs and health ------------------------------------------------------------------
    Setting(
        "AIR_SIMULATED_GPUS", "int", None,
        "use N simulated GPUs instead of NVML (tests and demos); a bad value means no GPUs,"
        " with a note",
        "a count 0-1024", lambda v: 0 <= v <= 1024, strict=False,
        default_text="unset: NVML's GPUs",
    ),
    Setting(
        "AIR_SIMULATED_GPU_FAULTS", "str", None,
        "a JSON file of faults to inject into simulated GPUs, re-read on every check",
        default_text="unset: no faults",
    ),
    Setting(
        "AIR_GPU_MAX_TEMP_C", "float", 90.0,
        "the GPU temperature (°C) above which a GPU fails its check; a bad value falls back"
        " to the default, with a note",
        "a temperature 20-150 °C", lambda v: 20 <= v <= 150, strict=False,
    ),
    Setting(
        "AIR_HEALTH_INTERVAL_S", "float", 5.0,
        "seconds between GPU health checks while a job runs",
        "a number of seconds > 0", _positive,
    ),
    Setting(
        "AIR_PREFLIGHT_TIMEOUT_S", "float", 120.0,
        "time limit of the deep check (`air doctor --deep`); a bad value falls back to the"
        " default",
        "a number of seconds > 0", _positive, strict=False,
    ),
    Setting(
        "AIR_PREFLIGHT_ALLOC_MB", "float", None,
        "memory the deep check allocates per GPU; a bad value falls back to the default",
        "a number of MiB > 0", _positive, strict=False,
        default_text="1024 on CUDA, 16 on CPU",
    ),
    # --- the supervisor -------------------------------------------------------------------
    Setting(
        "AIR_GRACE_S", "float", 10.0,
        "seconds between SIGTERM and SIGKILL when a job is cancelled, times out or is preempted",
        "a number of seconds >= 0", _at_least(0),
    ),
    Setting(
        "AIR_CONTAINER_ENGINE", "str", None,
        "the engine that runs jobs with an `image` (`air doctor` checks it)",
        "`podman` or `docker`", lambda v: v in ("podman", "docker"),
        default_text="the first of podman and docker on PATH",
    ),
    Setting(
        "AIR_CONTAINER_FIXES", "str", "on",
        "`on`: when the engine's defaults fail here in a known way (ulimits, cgroups), air"
        " passes it its own containers.conf overlay (under AIR_HOME/containers); `off`: never",
        "`on` or `off`", lambda v: v in ("on", "off"),
    ),
    Setting(
        "AIR_TRACKING_WRITER", "str", "on",
        "whether supervisors hand their MLflow writes to one writer process per home"
        " (runtime/runs/tracking_writer.py: MLflow, ~170 MB, stays out of every supervisor):"
        " `on`, or `off` to load MLflow in each supervisor",
        "`on` or `off`", lambda v: v in ("on", "off"),
    ),
    Setting(
        "AIR_SUPERVISOR_LINGER_S", "float", 60.0,
        "seconds an idle supervisor waits for a pass to hand it a job (0: exit at once)",
        "a number of seconds >= 0", _at_least(0),
    ),
    Setting(
        "AIR_STALL_TIMEOUT_MIN", "float", 30.0,
        "minutes a running job may go without progress (no new log content: the same line or"
        " \\r-redraw again is none; no new metric step; a main-thread stack unchanged between"
        " two samples; idle GPUs; under a twentieth of a core of CPU, or any while a stack waits"
        " in a collective; outside a declared phase) before it is stalled: its stacks are saved"
        " and its `on_stall` applies; a spec's `stall_timeout_min` wins (0: off)",
        "a number of minutes >= 0", _at_least(0),
    ),
    Setting(
        "AIR_LOG_SEARCH_MAX_MB", "float", 256.0,
        "megabytes of a job's log that one search (`air logs --grep`, MCP get_logs grep=) reads"
        " at most, in bounded chunks; a search stopped there (or at its deadline) says the byte"
        " to go on from. A line is searched in its first 8 KB only, never read whole",
        "a number of megabytes > 0", _positive,
    ),
    Setting(
        "AIR_HOLDOUT_REUSE_WARN", "int", 5,
        "autoresearch: a held-out split read by more studies than this is warned about (choosing"
        " among studies by their held-out results overfits the held-out split too; 0: never)",
        "a whole number >= 0", _at_least(0),
    ),
    Setting(
        "AIR_MAX_INFRA_RETRIES", "int", 3,
        "infra failures (GPU fault, failed preflight, lost supervisor) after which a job is no"
        " longer requeued",
        "a whole number >= 0", _at_least(0),
    ),
    Setting(
        "AIR_RENDEZVOUS_TIMEOUT_S", "float", 300.0,
        "seconds a gang waits at its rendezvous: once one rank has entered"
        " `init_process_group`, the job fails if some rank has not within this time (each"
        " node's torchrun must join within it too)",
        "a number of seconds > 0", _positive,
    ),
    # --- the Slurm backend ------------------------------------------------------------------
    Setting(
        "AIR_SLURM_PARTITION", "str", None,
        "the partition Slurm jobs are submitted to (`sbatch --partition`)",
        default_text="the cluster's default partition",
    ),
    Setting(
        "AIR_SLURM_ACCOUNT", "str", None,
        "the account Slurm jobs are charged to (`sbatch --account`)",
        default_text="your default account",
    ),
    Setting(
        "AIR_SLURM_QOS", "str", None,
        "the quality of service of Slurm jobs (`sbatch --qos`)",
        default_text="the account's default QOS",
    ),
    Setting(
        "AIR_SLURM_SHARED_DIR", "path", None,
        "a folder every Slurm node mounts; on a cluster of more than this host, AIR_HOME lies"
        " under it, or each job runs from a copy there (air-jobs/<job>) and its output is"
        " fetched back into the job folder",
        default_text="none: only a cluster of this host alone",
    ),
    Setting(
        "AIR_SLURM_EXTRA", "str", None,
        "extra `#SBATCH` lines for every Slurm job, separated by `;` (e.g."
        " `--constraint=a100; --mem=64G`)",
        default_text="none",
    ),
    # --- the scheduler --------------------------------------------------------------------
    Setting(
        "AIR_CPU_SLOTS", "int", None,
        "CPU threads shared among running jobs; a bad value falls back to the default",
        "a whole number > 0", _positive, strict=False,
        default_text="the machine's cores",
    ),
    Setting(
        "AIR_QUEUE_WINDOW", "int", None,
        "queued jobs a scheduling pass looks at (the head of the queue); a bad value falls back"
        " to the default",
        "a whole number > 0", _positive, strict=False,
        default_text="max(16, 2 × GPUs)",
    ),
    Setting(
        "AIR_STARVATION_S", "float", 30.0,
        "seconds a blocked job waits before it reserves GPUs that backfill may not take",
        "a number of seconds >= 0", _at_least(0),
    ),
    Setting(
        "AIR_BYPASS_JOBS", "int", 0,
        "jobs submitted after a reserving head that may still overtake it (bounded bypass)",
        "a whole number >= 0", _at_least(0),
    ),
    # --- code snapshots -------------------------------------------------------------------
    Setting(
        "AIR_SNAPSHOT_MAX_FILES", "int", 20000,
        "the most files a job's code snapshot may hold (a bigger tree is refused, naming its"
        " biggest files and folders)",
        "a whole number > 0", _positive,
    ),
    Setting(
        "AIR_SNAPSHOT_MAX_MB", "float", 200.0,
        "the most megabytes (MiB) a job's code snapshot may hold",
        "a number of MiB > 0", _positive,
    ),
    Setting(
        "AIR_PATCH_MAX_FILE_MB", "float", 32.0,
        "the biggest file (MiB) a `--patch` may change (a patch on a bigger one is refused,"
        " naming it)",
        "a number of MiB > 0", _positive,
    ),
    Setting(
        "AIR_SNAPSHOT_RETENTION_DAYS", "float", 30.0,
        "days a finished job's code snapshot is kept after it ends (`air gc`, and a daily"
        " automatic pass, remove older ones; a queued or running job's snapshot is always kept)",
        "a number of days > 0", _positive,
    ),
    Setting(
        "AIR_GC_KEEP_DAYS", "float", None,
        "`air gc` keeps finished jobs that ended within this many days and removes older ones"
        " (folder, logs, index rows, MLflow run), unless AIR_GC_KEEP_JOBS keeps them; a study's"
        " kept trials, best and baseline, and jobs a live job references always stay",
        "a number of days > 0", _positive, default_text="unset: no job removed by age",
    ),
    Setting(
        "AIR_GC_KEEP_JOBS", "int", None,
        "`air gc` keeps the N finished jobs that ended last (and removes older ones unless"
        " AIR_GC_KEEP_DAYS keeps them), with the same exceptions",
        "a whole number >= 0", _at_least(0), default_text="unset: no job removed by count",
    ),
    # --- cost ----------------------------------------------------------------------------
    Setting(
        "AIR_GPU_PRICE_USD_PER_HOUR", "float", None,
        "dollars per GPU-hour for the cost of trials and studies (every GPU model); unset:"
        " a small table by GPU model (autoresearch/report/cost.py), overridden per model by"
        " AIR_GPU_PRICES",
        "a number of dollars >= 0", _at_least(0),
        default_text="unset: the table by GPU model (0 for unknown and simulated GPUs)",
    ),
    Setting(
        "AIR_GPU_PRICES", "str", None,
        "dollars per GPU-hour by GPU model, `MODEL=PRICE,...` (e.g. `H100=2.5,A10G=1.0`; a model"
        " matches a GPU whose name contains it)",
        "`MODEL=PRICE` pairs separated by commas",
        lambda v: all(
            "=" in p and p.split("=", 1)[0].strip() and p.split("=", 1)[1].strip()
            .replace(".", "", 1).isdigit() for p in v.split(",") if p.strip()
        ),
        default_text="unset: the built-in table",
    ),
    # --- the MCP server -------------------------------------------------------------------
    Setting(
        "AIR_MCP_TOKEN", "str", None,
        "the bearer token that `air-mcp --transport http` requires",
        default_text="unset: a generated token in AIR_HOME/mcp-token (owner-only); loopback only",
    ),
    # --- tests ----------------------------------------------------------------------------
    Setting(
        "AIR_TEST_CRASH_AT", "str", None,
        "tests only: a process kills itself (SIGKILL) at this named point, so a test can crash"
        " it exactly there: a launch step (`prepare:folder`, `launch:locked`, ... see"
        " air_skills/runtime/process/faults.py) or a journal event of the autoresearch loop",
        default_text="unset: never",
    ),
    # --- internal: set by the toolkit for its own processes ------------------------------
    Setting(
        "AIR_GANG_PLAN", "str", None,
        "internal (Ray, `nodes > 1`): the gang's plan as JSON, set by the launch for the gang"
        " driver (`air_skills.backends.ray.gang_driver`), which unsets it before the ranks start;"
        " never set it yourself",
        default_text="unset",
    ),
)  # fmt: skip

# What every job receives (written into its environment, never read by the toolkit itself).
JOB_ENV: dict[str, str] = {
    "AIR_JOB_ID": "the job's id",
    "AIR_CONFIG_FILE": "a JSON file holding the job's `config`",
    "AIR_CHECKPOINT_DIR": "a folder kept across retries and preemptions: save checkpoints here",
    "AIR_DATA_DIR": "a folder with one link per data input (`$AIR_DATA_DIR/<name>`)",
    "AIR_EVAL_SPLIT": "autoresearch trials: `val` during the search, `test` in the final"
    " re-evaluation's runs of a study with a holdout (only they may read the held-out split)",
    "AIR_ATTEMPT": "the attempt number (raised by each retry or preemption)",
    "AIR_HOME": "the home the job was launched from",
    "AIR_CODE_DIGEST": "the digest of the job's code snapshot (unset with `code: live`)",
    "AIR_CONFIG_JSON": "Ray only: the config in transit; unset before the command runs",
    "AIR_NUM_NODES": "Ray gangs (`nodes > 1`) only: how many nodes the gang spans",
    "AIR_NODE_IPS": "Ray gangs (`nodes > 1`) only: the nodes' addresses, comma-separated, in"
    " node-rank order (the first is the rendezvous' MASTER_ADDR)",
    "AIR_NODE_RANK": "Ray gangs (`nodes > 1`) only: this node's rank, 0 to AIR_NUM_NODES - 1",
    "AIR_TRIAL_JOB_DIR": "autoresearch evaluators only (not a job): the folder of the trial job"
    " being evaluated; its checkpoints are in AIR_CHECKPOINT_DIR",
    "AIR_EVALUATOR_OF": "autoresearch evaluators only: the study folder the evaluator serves (a"
    " loop that starts ends a stray evaluator of its study by it)",
}
