"""The Ray backend: jobs on a Ray cluster through its Jobs API (see ``backend``)."""

from air_skills.backends.ray.backend import RayBackend
from air_skills.backends.ray.settings import configure, main

__all__ = ["RayBackend", "configure", "main"]
