"""The Ray backend: jobs on a Ray cluster through its Jobs API."""
