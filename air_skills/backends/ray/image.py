"""A Ray job's image: resolved to its ID here when a local engine has it (provenance), else said."""

from __future__ import annotations

from air_skills.errors import InvalidInput
from air_skills.models import JobSpec
from air_skills.runtime.containers import container
from air_skills.runtime.containers.container import ContainerJob


def resolve_ray_image(spec: JobSpec) -> tuple[JobSpec, ContainerJob | None, str]:
    """(the spec with ``image_digest`` set when known here, the resolved image, a note).

    Ray's nodes pull the image by its name; the ID recorded is the one this machine's engine
    has (pulling it if needed, as for a local job). Without an engine here, or one that cannot
    get the image (a registry only the cluster reaches), the job still goes to Ray and the
    note says its ID is not recorded. A pinned ``image_digest`` that the image here no longer
    has is refused, as for a local job.
    """
    if spec.image is None:
        return spec, None, ""
    try:
        engine = container.engine_name()
        ident = container.image_id(engine, spec.image, spec.image_digest)
    except InvalidInput as exc:
        if exc.code == "image-digest-mismatch":
            raise
        why = exc.message.removesuffix("; nothing launched")
        return (
            spec,
            None,
            f"image {spec.image}: ID not recorded ({why}); Ray's nodes pull it by name",
        )
    image = ContainerJob(engine, spec.image, ident)
    return spec.model_copy(update={"image_digest": ident}), image, f"image {spec.image} is {ident}"
