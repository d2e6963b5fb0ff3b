"""``python -m txn`` is the ``txn`` command."""

import sys

from txn.cli import main

sys.exit(main())
