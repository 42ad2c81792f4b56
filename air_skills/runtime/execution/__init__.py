"""What a job's process receives and how a gang of ranks runs: argv, environment, torchrun, the
rendezvous watch, a rank's bootstrap.

May use containers, code, store, results and process.
"""
