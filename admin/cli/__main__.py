"""``python -m magnetar.admin.cli``: the ``magnetar`` program (what supervisors and tests start)."""

import sys

from magnetar.admin.cli.main import main

sys.exit(main())
