"""``python -m fedustat.cli``."""

import sys

from fedustat.cli import main

sys.exit(main())
