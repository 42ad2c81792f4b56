"""The spec `air launch` builds: a spec file (read safely), `--set` values, the options."""

from __future__ import annotations

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
