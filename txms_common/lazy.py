"""Package names that load on first use (PEP 562): a package's ``__init__`` names each
public name's home module, and importing the package (or one of its submodules) loads
none of them until a name is asked for."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str, home_of: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (its ``globals()`` is
    ``namespace``), whose names live in the modules ``home_of`` gives (name -> module):
    a name loads on first use and is kept in the namespace."""

    def getattr_(name: str) -> object:
        module = home_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value: object = getattr(importlib.import_module(module), name)
        namespace[name] = value  # loaded once
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(home_of))

    return getattr_, dir_
