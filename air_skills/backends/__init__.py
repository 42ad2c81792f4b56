"""Backends that run jobs: ``local`` (daemonless, this machine) and ``ray`` (a Ray cluster)."""
