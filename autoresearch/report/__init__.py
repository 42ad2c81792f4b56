"""A study's report: markdown, plot, summaries of the best trial, and the export of its code.

May use proposers, code, study, journal and spec.
"""
