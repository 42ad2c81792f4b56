"""The state store: SQLite under AIR_HOME (schema, migrations), job records, the pool's state beside
the jobs, estimates and the rebuild from job folders.

May use results and process.
"""
