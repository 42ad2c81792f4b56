"""Process primitives on Linux: identity (pid plus start time), signals and wakeups, fault-injection
points.

Imports nothing else of the runtime.
"""
