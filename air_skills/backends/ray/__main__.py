"""``python -m air_skills.backends.ray config ...``: the Ray backend's settings for AIR_HOME."""

import sys

from air_skills.backends.ray import main

sys.exit(main())
