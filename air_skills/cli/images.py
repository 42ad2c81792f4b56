"""`air images`: the container images this machine has, with their IDs, sizes and jobs."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from air_skills.cli.output import JsonOpt, client, emit_json, handle_errors, out, plain, say
from air_skills.runtime.containers import container

JOBS_SCANNED = 1000  # the most recent jobs whose images are matched


@handle_errors
def images(as_json: bool = JsonOpt) -> None:
    """Container images here (podman or docker): ID, size, and the jobs that ran in each."""
    engine = container.engine_name()
    rows = container.list_images(engine)
    used = _jobs_by_image(client())
    for row in rows:
        row["jobs"] = used.get(str(row["id"]), [])
    if as_json:
        emit_json(rows)
        return
    if not rows:
        say(out, f"no images in {engine}; build or pull one, then `air launch --image NAME`")
        return
    t = Table(title=plain(f"{engine} images"))
    for col in ("image", "id", "size", "jobs"):
        t.add_column(col)
    for row in rows:
        t.add_row(
            plain(", ".join(row["names"]) or "<none>"),  # type: ignore[arg-type]
            plain(str(row["id"]).removeprefix("sha256:")[:12]),
            plain(_size(row["size"])),
            plain(", ".join(row["jobs"]) or "-"),  # type: ignore[arg-type]
        )
    out.print(t)


def _jobs_by_image(c: Any) -> dict[str, list[str]]:
    """Job ids by the image ID they ran in (the most recent jobs first)."""
    used: dict[str, list[str]] = {}
    page = c.list(limit=JOBS_SCANNED)
    for info in page.items:
        if info.image_digest:
            used.setdefault(info.image_digest, []).append(info.job_id)
    return used


def _size(size: object) -> str:
    if not isinstance(size, int | float):
        return "?"
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000:
            return f"{size:.0f} {unit}"
        size /= 1000
    return f"{size:.0f} TB"
