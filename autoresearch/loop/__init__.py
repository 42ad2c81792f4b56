"""The study loop: launching trials, watching them, early stopping, decisions, confirmation, budgets
and the trusted evaluator.

May use report, proposers, code, study, journal and spec.
"""
