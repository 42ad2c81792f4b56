"""The spec `air launch` builds: a spec file (read safely), `--set` values, `--patch`, the
options. Typer-free: the typer command (cli/jobs.py) and the fast path (cli/fast/launch.py)
build it here, the same way."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

from air_skills.errors import InvalidInput, InvalidSpec


def parse_value(text: str) -> Any:
    """A `--set` value as YAML (safe_load: no python tags); what YAML refuses stays text."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    except RecursionError:
        raise too_deep("a --set value") from None


def too_deep(what: str) -> InvalidSpec:
    """The error for YAML nested past what the parser can follow (its recursion limit)."""
    return InvalidSpec(
        f"{what} is nested too deeply to read (a config holds at most a few levels)",
        hint="write the value out flat: a config is hyperparameters, e.g. --set lr=0.001",
    )


MAX_SPEC_BYTES = 4 << 20  # a job spec is a few lines; this bounds what a mistake reads


def read_spec_file(path: Path) -> str:
    """The text of a spec file: a regular file (a FIFO would block, /dev/zero never ends),
    at most MAX_SPEC_BYTES."""
    if path.exists() and not path.is_file():
        raise InvalidInput(f"{path} is not a regular file", hint="give a YAML or JSON file")
    with open(path, "rb") as f:
        data = f.read(MAX_SPEC_BYTES + 1)
    if len(data) > MAX_SPEC_BYTES:
        raise InvalidInput(
            f"{path} is over {MAX_SPEC_BYTES >> 20} MiB", hint="a job spec is a short YAML file"
        )
    return data.decode("utf-8", "replace")


def spec_from_args(
    spec_file: Optional[Path], command: list[str], options: dict[str, Any]
) -> dict[str, Any]:
    """The spec file's fields, then the command after `--`, then the options given."""
    spec: dict[str, Any] = {}
    if spec_file is not None:
        import yaml

        try:
            loaded = yaml.safe_load(read_spec_file(spec_file))
        except OSError as exc:
            raise InvalidInput(
                f"cannot read {spec_file}: {exc.strerror}", hint="give a readable YAML file"
            ) from None
        except yaml.YAMLError as exc:
            raise InvalidSpec(
                f"{spec_file} is not valid YAML: {exc}", hint="fix the YAML"
            ) from None
        except RecursionError:
            raise too_deep(str(spec_file)) from None
        if not isinstance(loaded, dict):
            raise InvalidSpec(f"{spec_file} must hold a mapping of JobSpec fields", hint="")
        spec.update(loaded)
    if command:
        spec["command"] = command
    for key, value in options.items():
        if value not in (None, [], {}):
            spec[key] = value
    if "command" not in spec:
        raise InvalidSpec(
            "no command to run",
            hint="give it after `--` (air launch -- python train.py) or in the spec file",
        )
    return spec


def split_sets(sets: list[str], what: str) -> dict[str, Any]:
    """`KEY=VALUE` options as a mapping; every malformed one reported at once."""
    pairs: dict[str, Any] = {}
    problems = []
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            problems.append(f"{what} {item!r} is not KEY=VALUE")
            continue
        pairs[key.strip()] = value
    if problems:
        raise InvalidSpec("bad options:", problems=problems, hint=f"write {what} KEY=VALUE")
    return pairs


MAX_PATCH_BYTES = 4 << 20  # a patch of code is far smaller; this bounds what a mistake reads


def read_patch(source: str) -> str:
    """The text of ``--patch``: a file, or stdin for ``-`` (at most MAX_PATCH_BYTES)."""
    if source == "-":
        text = sys.stdin.read(MAX_PATCH_BYTES + 1)
        if len(text) > MAX_PATCH_BYTES:
            raise InvalidInput("the patch on stdin is over 4 MiB", hint="give a smaller patch")
        return text
    path = Path(source)
    if not path.is_file():
        raise InvalidInput(f"--patch {source}: no such file", hint="give a unified diff file")
    with open(path, "rb") as f:
        data = f.read(MAX_PATCH_BYTES + 1)
    if len(data) > MAX_PATCH_BYTES:
        raise InvalidInput(f"{path} is over 4 MiB", hint="a patch of code is far smaller")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSpec(
            f"patch refused, nothing was launched: {path} is not UTF-8 text (binary?)",
            hint="make the patch with `git diff` from the tree's root (relative paths, text files)",
        ) from None


def launch_spec(args: list[str], command: list[str], given: dict[str, Any]) -> dict[str, Any]:
    """The spec of `air launch`: ``args`` (before `--`: a spec file, or nothing), the
    ``command`` after `--`, and ``given``: the options by parameter name, as typer gives
    them (``set_``, ``data`` and ``writable`` lists; unset ones None or missing)."""
    spec_file: Optional[Path] = None
    if args:
        if len(args) > 1 or not args[0].endswith((".yaml", ".yml", ".json")):
            raise InvalidInput(
                f"unexpected arguments {args!r}",
                hint="put the command after `--`: air launch [SPEC.yaml] -- COMMAND ARGS",
            )
        spec_file = Path(args[0])
    config = {k: parse_value(v) for k, v in split_sets(given.get("set_") or [], "--set").items()}
    data = split_sets(given.get("data") or [], "--data")
    patch = given.get("patch")
    options: dict[str, Any] = {key: given.get(key) for key in OPTIONS}
    options.update(
        data=[{"name": k, "path": v} for k, v in data.items()],
        patch=read_patch(patch) if patch is not None else None,
        writable=given.get("writable") or [],
        check_command=False if given.get("no_check_command") else None,
    )
    spec = spec_from_args(spec_file, command, options)
    if config:
        spec["config"] = {**(spec.get("config") or {}), **config}
    return spec


# the spec fields `air launch`'s options set, in the order the spec takes them
OPTIONS = (
    "name", "gpus", "procs", "nodes", "priority", "experiment", "timeout_min", "max_retries",
    "stall_timeout_min", "on_stall", "idempotency_key", "backend", "project", "preemptible",
    "data", "code", "patch", "image", "sandbox", "writable", "network", "check_command",
    "allow_duplicate", "config_as",
)  # fmt: skip
