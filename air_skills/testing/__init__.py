"""Test fixtures that ship with the package (a local Ray head)."""
