"""The study file's schema, its search space and the safe reading of YAML.

Imports nothing else of autoresearch.
"""
