"""Code-editing studies: a study's code base, the checks of a trial's patch, and diff summaries.

May use journal and spec.
"""
