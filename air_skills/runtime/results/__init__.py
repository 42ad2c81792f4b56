"""What an attempt ended as and what a job's log says: outcomes, NCCL signatures, the summary block,
log reading and search.

May use process only.
"""
