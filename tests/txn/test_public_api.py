"""The public API of ``txn``: what ``__all__`` names is there, comes from where the
table says, and every error of the tree is among it."""

from __future__ import annotations

import sys

import txn
from txn import errors


def test_all_names_exactly_the_table_and_each_resolves() -> None:
    assert txn.__all__ == sorted(txn.__all__)
    assert set(txn.__all__) == set(txn._HOME_OF)
    for name in txn.__all__:
        value = getattr(txn, name)
        assert value is getattr(sys.modules[txn._HOME_OF[name]], name)


def test_every_error_of_the_tree_is_exported() -> None:
    assert set(errors.__all__) <= set(txn.__all__)
    assert txn.FencedError is errors.FencedError
