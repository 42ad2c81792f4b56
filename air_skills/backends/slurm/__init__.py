"""The Slurm backend: jobs on a Slurm cluster through sbatch, squeue, scontrol and scancel."""

from air_skills.backends.slurm.backend import SlurmBackend

__all__ = ["SlurmBackend"]
