"""A job's MLflow run on the runtime's side: made or completed by the supervisor, ended with the
job, and spare runs made ahead.

May use code, store, results and process.
"""
