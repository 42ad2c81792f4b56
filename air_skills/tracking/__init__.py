"""Tracking: MLflow runs and metrics, data input lineage, job comparison."""
