"""Backends that run jobs: ``local`` (this machine), ``ray`` (a Ray cluster), ``slurm``."""
