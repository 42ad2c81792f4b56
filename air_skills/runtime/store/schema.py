"""The state database's tables and indexes, and the migration of an older AIR_HOME to them."""

from __future__ import annotations

import re
import sqlite3

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT UNIQUE NOT NULL,
    name TEXT NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    failure_kind TEXT,
    exit_code INTEGER,
    signal TEXT,
    message TEXT NOT NULL DEFAULT '',
    gpus TEXT NOT NULL DEFAULT '[]',
    cpus INTEGER,
    priority INTEGER NOT NULL,
    preemptible INTEGER NOT NULL DEFAULT 0,
    gpus_requested INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    user_retries INTEGER NOT NULL DEFAULT 0,
    infra_retries INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    queued_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL,
    run_id TEXT,
    experiment_id TEXT,
    log_path TEXT,
    backend TEXT NOT NULL DEFAULT 'local',
    backend_ref TEXT,
    project TEXT NOT NULL DEFAULT 'default',
    borrowing INTEGER NOT NULL DEFAULT 0,
    idempotency_key TEXT UNIQUE,
    supervisor_pid INTEGER,
    supervisor_start TEXT,
    job_pid INTEGER,
    job_start TEXT,
    stop_request TEXT,
    stop_reason TEXT,
    tracking_note TEXT,
    code TEXT,
    job_class TEXT,
    launched_by TEXT,
    run_key TEXT,
    near_key TEXT,
    results_at REAL
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status);
-- The scheduling pass reads the head of the queue in this order (a window, not all of it).
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs(priority DESC, seq) WHERE status='QUEUED';
CREATE INDEX IF NOT EXISTS jobs_queue_cpu ON jobs(priority DESC, seq)
    WHERE status='QUEUED' AND gpus_requested=0;
-- ... and the head of each resource shape (GPUs per job) and of each project's queue: what can
-- start in the idle GPUs, and each quota's own jobs, found through index ranges (issue 41.4).
CREATE INDEX IF NOT EXISTS jobs_queue_shape ON jobs(gpus_requested, priority DESC, seq)
    WHERE status='QUEUED';
CREATE INDEX IF NOT EXISTS jobs_queue_project ON jobs(project, priority DESC, seq)
    WHERE status='QUEUED';
-- Learned run-time estimates (runtime/store/estimates.py) read a class's latest successes.
CREATE INDEX IF NOT EXISTS jobs_class_done ON jobs(job_class, ended_at DESC)
    WHERE status='SUCCEEDED';
-- Who launched what (the shared board, quotas per identity).
CREATE INDEX IF NOT EXISTS jobs_launched_by ON jobs(launched_by, status);
-- A project's jobs: its page and its leaderboard counted and ranked from its own rows.
CREATE INDEX IF NOT EXISTS jobs_project ON jobs(project, seq);
-- No experiment twice (store/dedup.py): the same run, and runs differing only in numbers.
CREATE INDEX IF NOT EXISTS jobs_run_key ON jobs(run_key) WHERE run_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_near_key ON jobs(near_key) WHERE near_key IS NOT NULL;
-- Ended jobs whose results the index (store/results_index.py) does not hold yet: a few.
CREATE INDEX IF NOT EXISTS jobs_results_due ON jobs(seq)
    WHERE results_at IS NULL AND run_id IS NOT NULL;
-- A page or a leaderboard of one experiment (store/job_reads.py, store/results_index.py).
CREATE INDEX IF NOT EXISTS jobs_experiment ON jobs(json_extract(spec, '$.experiment'), seq);
CREATE TABLE IF NOT EXISTS gpus (
    idx INTEGER PRIMARY KEY,
    cordoned INTEGER NOT NULL DEFAULT 0,
    reason TEXT,
    cordoned_at REAL,
    health TEXT NOT NULL DEFAULT 'ok'
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id);
CREATE TABLE IF NOT EXISTS quotas (
    project TEXT PRIMARY KEY,
    gpus INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS idle_supervisors (
    pid INTEGER PRIMARY KEY,
    start TEXT NOT NULL,
    since REAL NOT NULL,
    tracking INTEGER NOT NULL DEFAULT 0
);
-- MLflow runs made ahead of time (runs/spare_runs.py): a launch claims one, no MLflow needed.
CREATE TABLE IF NOT EXISTS spare_runs (
    run_id TEXT PRIMARY KEY,
    uri TEXT NOT NULL,
    experiment TEXT NOT NULL,
    experiment_id TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS spare_runs_pool ON spare_runs(uri, experiment);
-- The (tracking URI, experiment) pools that launches asked spares of, and when last.
CREATE TABLE IF NOT EXISTS spare_pools (
    uri TEXT NOT NULL,
    experiment TEXT NOT NULL,
    wanted_at REAL NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS spare_pools_key ON spare_pools(uri, experiment);
-- The identities of air-mcp's HTTP callers (store/identities.py): tokens kept as hashes.
-- Their rights (issue 37): the backends they may use (comma-separated), whether they may run
-- unsandboxed, their data roots and the other projects whose logs they may read (JSON lists,
-- "*": all). A row from before gains the safe defaults: local only, sandboxed, nothing more.
CREATE TABLE IF NOT EXISTS identities (
    name TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL,
    project TEXT NOT NULL,
    max_gpus INTEGER,
    priority_max TEXT NOT NULL DEFAULT 'high',
    admin INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    revoked_at REAL,
    backends TEXT NOT NULL DEFAULT 'local',
    unsandboxed INTEGER NOT NULL DEFAULT 0,
    data_roots TEXT NOT NULL DEFAULT '[]',
    read_projects TEXT NOT NULL DEFAULT '[]'
);
CREATE UNIQUE INDEX IF NOT EXISTS identities_token ON identities(token_hash);
-- Proposals that suggest_trials handed out, claimed for a while (autoresearch/study/claims.py).
CREATE TABLE IF NOT EXISTS trial_claims (
    study TEXT NOT NULL,
    trial_key TEXT NOT NULL,
    config TEXT NOT NULL,
    claimed_by TEXT NOT NULL,
    claimed_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS trial_claims_key ON trial_claims(study, trial_key);
-- The jobs of one launch_jobs call or `air launch` sweep (store/batches.py): a batch id that
-- list_jobs, wait_for_jobs and cancel_job take. A job may be in several (a duplicate's job).
CREATE TABLE IF NOT EXISTS batch_jobs (
    batch_id TEXT NOT NULL,
    job_id TEXT NOT NULL,
    item INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS batch_jobs_key ON batch_jobs(batch_id, job_id);
CREATE INDEX IF NOT EXISTS batch_jobs_job ON batch_jobs(job_id);
-- The results index (store/results_index.py): per job and metric, the final value and step,
-- whether it is finite, the lowest and highest finite values and steps, the points. Ranked
-- by the three value columns (latest_value: the final value when finite) over every job.
CREATE TABLE IF NOT EXISTS results (
    job_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    key TEXT NOT NULL,
    final_value REAL,
    final_step INTEGER NOT NULL,
    final_finite INTEGER NOT NULL,
    latest_value REAL,
    low_value REAL,
    low_step INTEGER,
    high_value REAL,
    high_step INTEGER,
    points INTEGER NOT NULL,
    updated_at REAL NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS results_job ON results(job_id, key);
CREATE INDEX IF NOT EXISTS results_low ON results(key, low_value, seq);
CREATE INDEX IF NOT EXISTS results_high ON results(key, high_value, seq);
CREATE INDEX IF NOT EXISTS results_latest ON results(key, latest_value, seq);
"""


RUN_KEYS_SINCE = 9  # the version that added jobs.run_key (store/dedup.py)
SCHEMA_VERSION = 17  # raise it with every schema change: older homes gain the new columns


def _schema_columns() -> dict[str, dict[str, str]]:
    """{table: {column: declaration}} as SCHEMA declares them."""
    tables: dict[str, dict[str, str]] = {}
    for block in re.findall(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\n\);", SCHEMA, re.S):
        name, body = block
        cols = {}
        for line in body.strip().splitlines():
            col, _, decl = line.strip().rstrip(",").partition(" ")
            # A column added later cannot be PRIMARY KEY/UNIQUE in SQLite: keep the type.
            cols[col] = decl.replace("PRIMARY KEY AUTOINCREMENT", "").replace("UNIQUE", "")
        tables[name] = cols
    return tables


def migrate(c: sqlite3.Connection) -> None:
    """Create the tables, and add the columns that an older AIR_HOME lacks (inside ``c``'s
    transaction; nothing to do when another process migrated first)."""
    old = c.execute("PRAGMA user_version").fetchone()[0]
    if old == SCHEMA_VERSION:
        return
    statements = [s for s in SCHEMA.split(";") if s.strip()]
    # Tables first, then the columns an older home lacks, then the indexes (which may use them).
    is_index = ["CREATE INDEX" in s for s in statements]
    for statement, index in zip(statements, is_index, strict=True):
        if not index:
            c.execute(statement)
    for table, columns in _schema_columns().items():
        have = {r["name"] for r in c.execute(f"PRAGMA table_info({table})")}
        for name, decl in columns.items():
            if name not in have:
                c.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")
    for statement, index in zip(statements, is_index, strict=True):
        if index:
            c.execute(statement)
    if 0 < old < RUN_KEYS_SINCE:  # jobs from before run keys: checked for duplicates too
        from air_skills.runtime.store.dedup import backfill

        backfill(c)
    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
