"""``python -m autoresearch.cli``: the ``autoresearch`` command (how a study's loop is started)."""

from autoresearch.cli import main

main()
