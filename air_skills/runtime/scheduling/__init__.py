"""Scheduling: the pure scheduler, the daemonless passes that apply its decisions, their SQL, and
the spawn of supervisors.

May use runs, execution, containers, code, store, results and process.
"""
