"""A launch's container image: resolved to its ID (provenance), recorded, its mounts checked."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from air_skills.errors import InvalidInput
from air_skills.runtime.containers import container
from air_skills.runtime.containers.container import ContainerJob
from air_skills.runtime.launch.prepare import LaunchContext, PreparedJob, discard_prepared

if TYPE_CHECKING:
    from air_skills.models import JobSpec


def resolve_image(spec: JobSpec) -> tuple[JobSpec, ContainerJob | None]:
    """The spec with its image's ID set (``image_digest``), and what the job runs in.

    An image that is not here and cannot be pulled, a missing or broken engine, or an image
    that no longer has the pinned ID is refused now (exit 2), not a failed job later.
    """
    if spec.image is None:
        return spec, None
    engine = container.engine_name()
    ident = container.image_id(engine, spec.image, spec.image_digest)
    return spec.model_copy(update={"image_digest": ident}), ContainerJob(engine, spec.image, ident)


def image_tags(image: ContainerJob | None) -> dict[str, str]:
    """The MLflow run's record of the image: a rerun can pin the same ID."""
    if image is None:
        return {}
    return {"air.image": image.image, "air.image.digest": image.image_id}


def attach_image(
    rt: LaunchContext, job: PreparedJob, image: ContainerJob | None, tracking_uri: str
) -> None:
    """Record the job's image in its folder, after checking what the container would mount
    (a data input or home above the code's path is refused, and the prepared job discarded),
    with the engine settings air applies (engine_config.py)."""
    if image is None:
        return
    try:
        container.mounts(Path(job.jdir), home=str(rt.home))  # the store: relayed, not mounted
    except InvalidInput:
        discard_prepared(rt, job)
        raise
    # The settings this engine needs here (a probe once per engine binary): recorded with it.
    from air_skills.runtime.containers import engine_config

    setup = engine_config.setup_for(rt.home, image.engine, image.image_id)
    image = replace(image, fixes=setup.fixes, engine_env=setup.env)
    image.save(Path(job.jdir))


def ray_image(spec: JobSpec) -> dict[str, str]:
    """Ray's ``runtime_env`` field for the job's image: Ray runs the job in that container."""
    return {"image_uri": spec.image} if spec.image else {}


# Said in a Ray image job's message: where its code comes from.
IMAGE_HOLDS_CODE = (
    "the code runs as the image holds it: Ray uploads no working_dir beside image_uri,"
    " so no snapshot is taken"
)
