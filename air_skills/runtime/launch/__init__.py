"""Launch preparation shared by every backend: the job's folder, its MLflow run, launch intents,
dry-run checks and the cleanup of crashed launches.

May use every other part of the runtime; nothing in the runtime imports it.
"""
