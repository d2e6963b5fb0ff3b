"""``Engine``: what every throwaway server of the harness is — ``start()``, ``stop()``
(idempotent), and a context manager that stops it on leaving."""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["Engine"]


class Engine:
    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
