"""What a job's process receives and how a gang of ranks runs: argv, environment, torchrun, the
rendezvous watch, a rank's bootstrap; the sandbox it runs in and the relay of its metrics.

May use containers, code, store, results and process.
"""
