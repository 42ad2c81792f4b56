"""Backends that run jobs: ``local`` (daemonless, this machine), ``ray`` (a Ray cluster) and ``slurm``."""
