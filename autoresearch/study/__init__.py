"""A study as the user wrote it, loaded and checked, and the folder that holds it (lock, loop info,
stop requests).

May use journal and spec.
"""
