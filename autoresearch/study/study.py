"""The study file: read it (YAML, a study folder or a dict), report every problem at once,
check that it can run here, and write it back. Its schema is in ``study_schema``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from air_skills.errors import InvalidSpec
from autoresearch.spec.key_hints import suggest
from autoresearch.spec.safe_read import read_study_yaml
from autoresearch.spec.study_schema import Study, check_value
from autoresearch.spec.study_sections import (
    PARAM_TYPES,
    PROPOSER_TYPES,
    Budget,
    ChoiceParam,
    EarlyStopping,
    FloatParam,
    IntParam,
    LlmProposerConfig,
    Noise,
    Objective,
    Param,
    Price,
    ProposerConfig,
    RandomProposerConfig,
    TpeProposerConfig,
)

STUDIES_DIR = "studies"


# --- loading -----------------------------------------------------------------------------------


def read_yaml(path: Path) -> Any:
    """The YAML document in a study file: a regular file of at most 1 MB, UTF-8, no aliases."""
    return read_study_yaml(path)


class _PlainDumper(yaml.SafeDumper):
    """Writes a value seen twice out twice: the study reader refuses anchors and aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _problems(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ())]
        # drop the discriminator tags pydantic puts in the location
        if len(loc) >= 3 and loc[0] == "search_space" and loc[2] in PARAM_TYPES:
            del loc[2]
        if len(loc) >= 2 and loc[0] == "proposer" and loc[1] in PROPOSER_TYPES:
            del loc[1]
        where = ".".join(loc)
        kind = err.get("type", "")
        msg = err.get("msg", "invalid")
        close = suggest(Study, loc) if kind == "extra_forbidden" else None
        if kind == "extra_forbidden":
            msg = "unknown key"
        elif kind == "missing":
            msg = "required key is missing"
        elif kind == "union_tag_not_found":
            msg = (
                "missing 'type' (float, int or choice)"
                if "search_space" in loc
                else ("missing 'type' (" + ", ".join(PROPOSER_TYPES) + ")")
            )
        elif kind == "union_tag_invalid":
            msg = f"unknown type {err.get('input', {}).get('type')!r}; " + (
                "use float, int or choice" if "search_space" in loc else "use tpe, random or llm"
            )
        elif kind == "string_pattern_mismatch" and loc == ["name"]:
            msg = (
                "use letters, digits, '_', '.', '-' (at most 100), starting with a letter or digit"
            )
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        elif kind == "too_short" and loc == ["search_space"]:
            msg = "the search space is empty: give at least one parameter"
        if isinstance(err.get("input"), str) and kind in ("float_type", "int_type"):
            msg += f" (got the text {err['input']!r})"
        for part in msg.split("\n"):
            out.append(f"{where}: {part}" if where else part)
        if close:  # its own line, as for a job spec's fields (errors.pydantic_problems)
            out.append(f"did you mean {close}?")
    return out


def parse_study(data: Any, source: str = "study") -> Study:
    """Validate a study dict; raise InvalidSpec listing every problem at once."""
    if not isinstance(data, dict):
        raise InvalidSpec(
            f"{source} must be a mapping of keys to values, not {type(data).__name__}",
            problems=[f"(study): expected a mapping, got {type(data).__name__}"],
            hint="see examples/mlp/study.yaml for a study file",
        )
    try:
        return Study.model_validate(data)
    except ValidationError as exc:
        problems = _problems(exc)
        raise InvalidSpec(
            f"invalid {source}:",
            problems=problems,
            hint="fix the keys listed; valid top-level keys: " + ", ".join(Study.model_fields),
            valid_keys=list(Study.model_fields),
        ) from None


def anchor_workdir(study: Study, base: Path, origin: str) -> Study:
    """The one place a relative ``workdir`` is decided: joined to ``base`` (``origin`` says
    what that folder is: the study file's, or the caller's for an inline study), as docker
    compose and GitHub Actions do. An absolute workdir stays. The study's other relative
    paths (its script, the evaluator's, data) are relative to this workdir."""
    given = study.workdir
    path = Path(given).expanduser()
    base = _folder(base.expanduser())
    workdir = (base / path).resolve()  # an absolute path replaces base
    note = f"workdir {given!r}"
    if not path.is_absolute():
        note += f" resolved against {origin} {base}"
    out = study.model_copy(update={"workdir": str(workdir)})
    out._workdir_note = study._workdir_note or note  # the first anchoring is what the user wrote
    out._workdir_given = study._workdir_given
    return out


def check_runnable(study: Study, base: Path | None = None) -> Study:
    """The study with an absolute workdir, once its folder and the files it names exist, so
    a typo fails now rather than as N failed trials. A workdir still relative (an inline
    study) resolves against ``base``, else the current folder."""
    if not Path(study.workdir).expanduser().is_absolute():
        origin = "the given folder" if base is not None else "the current folder"
        study = anchor_workdir(study, base or Path.cwd(), origin)
    problems = _not_found(study)
    if problems and study._workdir_given is not None:
        # A study file written to be run from a folder (DESIGN.md's example says "run from
        # the repo root"): its workdir relative to the current folder, when that one works.
        given = study._workdir_given
        here = anchor_workdir(study.model_copy(update={"workdir": given}), Path.cwd(), "")
        here._workdir_note = f"workdir {given!r} resolved against the current folder {Path.cwd()}"
        also = _not_found(here)
        if not also:
            return here
        if Path(here.workdir).is_dir():  # a folder that is not there was no candidate
            problems += also
    if problems:
        raise InvalidSpec(
            f"study {study.name!r} cannot run:",
            problems=problems,
            hint="a study file's workdir is relative to the file's folder, else to the folder"
            " you run from (an inline study's: to the current folder); its script, evaluator"
            " and data paths are relative to the workdir",
        )
    return study


def _not_found(study: Study) -> list[str]:
    """What the study names that is not there, each with how its path was resolved."""
    workdir = Path(study.workdir)
    note = study._workdir_note or f"workdir {study.workdir!r}"
    if not workdir.is_dir():
        return [f"{note}: folder {workdir} not found"]
    return [f"{where}: {note}: {full} not found" for where, full in _missing(study)]


def _missing(study: Study) -> list[tuple[str, Path]]:
    """(field, absolute path) of each file the study names that is not there."""
    from air_skills.runtime.launch.launch_check import script_args

    workdir = Path(study.workdir)
    named = [("command", a) for a in script_args(study.command)]
    if study.evaluate is not None:  # runs in a copy of the workdir: the same relative paths
        named += [("evaluate.command", a) for a in script_args(study.evaluate.command)]
    named += [(f"data.{d.name}", d.path) for d in study.data]
    holdout = study.objective.holdout
    if holdout is not None:  # read at the end of the search: found missing now, not then
        if holdout.command:
            named += [("objective.holdout.command", a) for a in script_args(holdout.command)]
        named += [(f"objective.holdout.data.{d.name}", d.path) for d in holdout.data]
    out = []
    for where, given in named:
        full = Path(os.path.normpath(workdir / Path(given).expanduser()))  # absolute stays
        if not full.exists():
            out.append((where, full))
    return out


def load_study(source: str | Path | dict[str, Any], base: Path | None = None) -> Study:
    """A study from a YAML file, a study folder (its saved study.yaml) or a dict; validated.

    A file's relative workdir is made absolute against the file's folder (``check_runnable``
    falls back to the current folder when nothing is found there); a dict's against ``base``
    when given, else it stays relative until ``check_runnable`` (the caller's cwd).
    """
    if isinstance(source, dict):
        study = parse_study(source, "inline study")
        return anchor_workdir(study, base, "the given folder") if base is not None else study
    path = Path(source).expanduser()
    if path.is_dir():
        if not (path / "study.yaml").exists():
            from autoresearch.journal.journal import Journal, replay

            saved = replay(Journal(path).read()).study
            if saved:
                study = parse_study(saved, f"journal study in {path}")
                return anchor_workdir(study, _folder(path), "the study folder")
        path = path / "study.yaml"
    study = parse_study(read_yaml(path), f"study file {path}")
    if not Path(study.workdir).expanduser().is_absolute():
        study._workdir_given = study.workdir
    return anchor_workdir(study, _folder(path).parent, "the study file's folder")


def _folder(path: Path) -> Path:
    """``path`` made absolute without following symlinks: a linked study file's relative
    paths start beside the link, as the user sees it."""
    return Path(os.path.abspath(path))


def default_study_dir(study: Study, base: Path | None = None) -> Path:
    """``base``/studies/<name> when a base is given; else AIR_HOME/studies/<name>: never in
    the code tree, whose snapshots would carry the growing journal (issue 24)."""
    if base is not None:
        return (base / STUDIES_DIR / study.name).resolve()
    from autoresearch.study.registry import default_folder

    return default_folder(study.name)


def dump_study(study: Study) -> str:
    return yaml.dump(study.to_dict(), Dumper=_PlainDumper, sort_keys=False, allow_unicode=True)


__all__ = [
    "PARAM_TYPES",
    "PROPOSER_TYPES",
    "STUDIES_DIR",
    "Budget",
    "ChoiceParam",
    "EarlyStopping",
    "FloatParam",
    "IntParam",
    "LlmProposerConfig",
    "Noise",
    "Objective",
    "Param",
    "Price",
    "ProposerConfig",
    "RandomProposerConfig",
    "Study",
    "TpeProposerConfig",
    "anchor_workdir",
    "check_runnable",
    "check_value",
    "default_study_dir",
    "dump_study",
    "load_study",
    "parse_study",
    "read_yaml",
]
