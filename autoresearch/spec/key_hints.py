"""Did-you-mean for an unknown key at any depth of a study file (``budget.concurency``).

The keys valid at a location are read from the pydantic models: each part of the location
names a field, whose models (through Optional, unions, Annotated and dict values) hold the next.
"""

from __future__ import annotations

import difflib
from typing import Any, get_args

from pydantic import BaseModel


def suggest(model: type[BaseModel], loc: list[str]) -> str | None:
    """The location with its last key spelled as the closest valid key there, or None."""
    keys = sorted({k for m in _models_at([model], loc[:-1]) for k in m.model_fields})
    close = difflib.get_close_matches(loc[-1], keys, n=1, cutoff=0.6)
    return ".".join([*loc[:-1], close[0]]) if close else None


def _models_at(models: list[type[BaseModel]], parents: list[str]) -> list[type[BaseModel]]:
    parts = list(parents)
    while parts and models:
        name = parts.pop(0)
        fields = [m.model_fields[name] for m in models if name in m.model_fields]
        found: list[type[BaseModel]] = []
        for field in fields:
            annotation = field.annotation
            if _dict_value(annotation) is not None and parts:  # a mapping's key: skip it
                parts.pop(0)
                annotation = _dict_value(annotation)
            found += _models_in(annotation)
        models = found
    return models


def _dict_value(annotation: Any) -> Any:
    """The value type of a dict annotation (or of the dict inside Optional), else None."""
    for candidate in (annotation, *get_args(annotation)):
        if getattr(candidate, "__origin__", None) is dict and get_args(candidate):
            return get_args(candidate)[-1]
    return None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models in ``annotation`` (itself, or inside Optional, unions, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]
