"""``python -m tms.cli``: the ``tms`` command line."""

from __future__ import annotations

import sys

from tms.cli import main

sys.exit(main())
