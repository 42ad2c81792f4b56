"""The supervisor: one small process per started job that runs its attempts, checks its GPUs and
data, and idles waiting for the next job.

May use scheduling, runs, execution, containers, code, store, results and process.
"""
