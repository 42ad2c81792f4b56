"""Every AIR_* environment variable, parsed and validated once (stdlib only)."""
