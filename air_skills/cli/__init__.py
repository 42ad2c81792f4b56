"""The `air` command line."""
