"""The MCP tools' logic as plain functions that know nothing of MCP (``server`` registers them).

Each takes an ``air_skills.Client`` first; the rest of its signature is the tool's schema.
"""

from mcp_server.tools.batch import launch_jobs
from mcp_server.tools.code import export_code
from mcp_server.tools.job_list import list_jobs
from mcp_server.tools.jobs import (
    cancel_job,
    compare_jobs,
    get_job,
    get_metrics,
    launch_job,
    list_gpus,
)
from mcp_server.tools.logs import get_logs
from mcp_server.tools.studies import (
    get_study,
    start_study,
    steer_study,
    stop_study,
    suggest_trials,
    wait_for_study,
)
from mcp_server.tools.wait import WaitAborted, wait_for_jobs

__all__ = [
    "WaitAborted",
    "cancel_job",
    "compare_jobs",
    "export_code",
    "get_job",
    "get_logs",
    "get_metrics",
    "launch_job",
    "launch_jobs",
    "list_gpus",
    "list_jobs",
    "start_study",
    "get_study",
    "steer_study",
    "stop_study",
    "suggest_trials",
    "wait_for_jobs",
    "wait_for_study",
]
