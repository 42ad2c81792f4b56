"""Code snapshots: the content-addressed store, a job's private view, patches, and the code verbs
(diff, export, gc).

May use store, results and process.
"""
