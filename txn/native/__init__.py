"""The native engine: the transaction server's hot path compiled from C (``txn.native._core``,
built from ``txn/native/src`` when the package is installed with a C compiler).

``AVAILABLE`` says whether the extension was built; without it everything runs on the
pure-Python engine (docs/txn.md, "The native engine").
"""

from __future__ import annotations

__all__ = ["AVAILABLE", "UNAVAILABLE_REASON"]

try:
    from txn.native import _core  # noqa: F401 - imported to learn whether it was built
except ImportError:  # built without a C compiler, or not built at all
    AVAILABLE = False
    UNAVAILABLE_REASON = "txn.native._core was not built (no C compiler when installing?)"
else:
    AVAILABLE = True
    UNAVAILABLE_REASON = ""
