"""The study journal: the append-only record of a study's events, its replay, and the per-event
shape checks.

May use spec only.
"""
