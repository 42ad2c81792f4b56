"""What every Python process of a tracked job imports first (its folder leads PYTHONPATH):
``sitecustomize`` keeps the usual MLflow habits working in the job's own run."""
