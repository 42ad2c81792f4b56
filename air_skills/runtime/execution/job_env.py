"""The one allow-list of what a job receives from the process that launched it.

A job never gets a copy of the launcher's environment: the server or CLI that launches it may
hold ``AIR_MCP_TOKEN``, provider API keys or cloud credentials, and a job is untrusted code
(a job that read the owner's token became the owner: issue 37). It gets the names below
(``JOB_ENV_ALLOW``, the ``JOB_ENV_PREFIXES``), never one that looks like a secret
(``is_secret``), then air's own variables (``AIR_JOB_ID``, ``CUDA_VISIBLE_DEVICES``, the MLflow
run, the thread caps: launch_env.py) and last its spec's ``env``: a job that needs a key names
it there, and gets exactly that.

What the launch keeps in the job's folder (``env.json``, read back by its supervisor for the
launch's settings and tracking URI) is ``launch_environment``: the same names plus the non-secret
``AIR_*`` settings and MLflow's. ``PASSTHROUGH_AIR_SETTINGS`` is that list of settings, also the
one ``air mcp-config`` may copy into a client's config. Stdlib only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# Exact names a job inherits (when the launcher has them). None is a secret: paths, locale,
# terminal, caches and offline switches of the ML libraries, and what a container engine needs
# to be reached (an image job's env goes to the engine's command).
JOB_ENV_ALLOW = frozenset(
    {
        # the process basics
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "TMPDIR",
        # Python: where the researcher's imports are (PYTHONPATH is code, not a secret; a
        # sandboxed job sees those folders read-only anyway) and its environment
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONWARNINGS",
        "PYTHONIOENCODING",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "CONDA_DEFAULT_ENV",
        "LD_LIBRARY_PATH",
        # caches and offline switches of the usual ML libraries
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_RUNTIME_DIR",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_DATASETS_CACHE",
        "HF_HUB_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "HF_HUB_DISABLE_TELEMETRY",
        "HF_HUB_ENABLE_HF_TRANSFER",
        "TRANSFORMERS_CACHE",
        "TRANSFORMERS_OFFLINE",
        "TOKENIZERS_PARALLELISM",
        "TORCH_HOME",
        "TORCH_EXTENSIONS_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_CACHE_DIR",
        "PYTORCH_CUDA_ALLOC_CONF",
        "CUBLAS_WORKSPACE_CONFIG",
        "KERAS_HOME",
        "MPLBACKEND",
        "MPLCONFIGDIR",
        "WANDB_MODE",
        "WANDB_DIR",
        # certificates and proxies (a proxy URL with a password in it is dropped: is_secret)
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        # an image job's env is the container engine's command's
        "DOCKER_HOST",
        "DOCKER_CONFIG",
        "DOCKER_CONTEXT",
        "CONTAINER_HOST",
        "DBUS_SESSION_BUS_ADDRESS",
    }
)

# Families a job inherits by prefix: locale, CUDA's and NCCL's own settings (a multi-node job
# needs NCCL_SOCKET_IFNAME and the like). A name of theirs that looks secret is still dropped.
JOB_ENV_PREFIXES = ("LC_", "CUDA_", "NCCL_", "CONTAINERS_")

# MLflow's client settings the launcher may hold (timeouts, system metrics): passed. Its
# credentials only to a job that logs to a tracking server itself (not through the relay),
# where its run needs them; every other name that looks secret never.
MLFLOW_CREDENTIALS = frozenset(
    {
        "MLFLOW_TRACKING_TOKEN",
        "MLFLOW_TRACKING_USERNAME",
        "MLFLOW_TRACKING_PASSWORD",
        "MLFLOW_TRACKING_INSECURE_TLS",
        "MLFLOW_TRACKING_SERVER_CERT_PATH",
        "MLFLOW_TRACKING_CLIENT_CERT_PATH",
    }
)

# What a name that holds a secret looks like. AIR_MCP_TOKEN, ANTHROPIC_API_KEY, HF_TOKEN,
# AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, GOOGLE_APPLICATION_CREDENTIALS, PGPASSWORD...
_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW|PASSPHRASE|API_?KEY|ACCESS_?KEY|PRIVATE|CREDENTIAL|AUTH|COOKIE"
    r"|_KEY$|_PWD$",
    re.IGNORECASE,
)
# A value that carries a password: ``scheme://user:pass@host`` (a proxy, a database URL).
_SECRET_VALUE = re.compile(r"://[^/@\s]*:[^/@\s]*@")

# Settings that are never copied: the owner's token, and test hooks of one process.
_NOT_PASSED = frozenset({"AIR_MCP_TOKEN", "AIR_TEST_CRASH_AT", "AIR_GANG_PLAN"})


def is_secret(name: str, value: str = "") -> bool:
    """Whether ``name`` (or its ``value``) looks like it holds a secret."""
    if name in MLFLOW_CREDENTIALS:
        return True
    return bool(_SECRET_NAME.search(name) or _SECRET_VALUE.search(value))


def _passthrough_air_settings() -> tuple[str, ...]:
    from air_skills import settings

    return tuple(
        name for name in settings.SETTINGS if name not in _NOT_PASSED and not is_secret(name)
    )


# The non-secret AIR_* settings (every one settings.py parses but AIR_MCP_TOKEN and the test
# hooks): what a launch keeps for its supervisor, and what `air mcp-config` may carry.
PASSTHROUGH_AIR_SETTINGS: tuple[str, ...] = _passthrough_air_settings()


def _allowed(name: str) -> bool:
    return name in JOB_ENV_ALLOW or name.startswith(JOB_ENV_PREFIXES)


def job_environment(
    launched: Mapping[str, str], *, direct_tracking: bool = False
) -> dict[str, str]:
    """What a job inherits from the launch's environment ``launched``: the allow-listed names,
    MLflow's client settings (its credentials only with ``direct_tracking``: the job logs to
    a server itself), nothing that looks secret. air's own variables and the spec's ``env``
    are added on top by the caller (launch_env.command_launch)."""
    out: dict[str, str] = {}
    for name, value in launched.items():
        if name.startswith("MLFLOW_"):
            if name in MLFLOW_CREDENTIALS:
                if direct_tracking:
                    out[name] = value
            elif not is_secret(name, value):
                out[name] = value
        elif _allowed(name) and not is_secret(name, value):
            out[name] = value
    return out


def launch_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What a launch keeps in the job's folder (``env.json``): the job's names, the non-secret
    AIR_* settings its supervisor reads (data roots, bwrap, stall and rendezvous limits) and
    MLflow's (the supervisor makes the job's run where the launch said, credentials included)."""
    passed = set(PASSTHROUGH_AIR_SETTINGS)
    out = job_environment(environ, direct_tracking=True)
    out.update({k: v for k, v in environ.items() if k in passed})
    return out
