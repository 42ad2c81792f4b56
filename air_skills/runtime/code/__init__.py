"""Code snapshots: the content-addressed store, a job's private view, patches, and the code verbs
(diff, export, gc); blobs that do not hash to their name, quarantined.

May use store, results and process.
"""
