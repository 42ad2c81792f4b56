"""What the API hands back besides a job: a log chunk, metrics, a page of items."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel, Field


class LogChunk(BaseModel):
    job_id: str
    text: str
    offset: int = Field(description="byte offset where text starts")
    next_offset: int = Field(description="pass as offset to read on")
    size: int = Field(description="log size in bytes")
    truncated: bool = False


class Metrics(BaseModel):
    job_id: str
    run_id: str | None
    latest: dict[str, float] = Field(default_factory=dict)
    history: dict[str, list[list[float]]] = Field(default_factory=dict)


T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = None
    total: int | None = None  # jobs on every page with these filters (None: not counted)
