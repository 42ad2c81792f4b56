"""``python -m air_skills.cli``: the `air` command."""

from air_skills.cli.app import main

main()
