"""``python -m benchmarks.peers``: see ``benchmarks.peers.run``."""

from __future__ import annotations

import sys

from benchmarks.peers.run import main

sys.exit(main())
