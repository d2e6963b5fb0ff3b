"""``LoopTimer``: a one-shot timer on an event loop with microsecond precision.

Why: uvloop keeps libuv's clock, which counts milliseconds and is read once per loop
iteration: ``loop.time()`` is that cached value, and ``call_at``/``call_later`` round
their delay to whole milliseconds, so a 200 µs deadline fires on the next iteration (0
ms) and the loop polls until the millisecond turns. The server's commit delay is a few
hundred microseconds, so it keeps its own time with ``time.monotonic()`` and waits with
this timer.

How: on Linux a ``timerfd`` (``CLOCK_MONOTONIC``, the clock of ``time.monotonic()``),
armed at an absolute deadline and watched by the loop like a socket (``add_reader``);
the loop sleeps until the deadline or other work. Where there is no ``timerfd`` (or no
libc to call it through), ``loop.call_later``.

Contract: ``arm(deadline)`` schedules ``callback()`` once on the loop at or after
``deadline`` (``time.monotonic()`` seconds), replacing an armed deadline; ``cancel()``
disarms (a callback not yet run will not run); ``close()`` cancels and frees the timer.
Use from the loop's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import time
from collections.abc import Callable

__all__ = ["LoopTimer"]

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        libc.timerfd_create.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.timerfd_settime.argtypes = (
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Itimerspec),
            ctypes.c_void_p,
        )
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


class LoopTimer:
    """See the module docstring."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self._loop = loop
        self._callback = callback
        self._handle: asyncio.TimerHandle | None = None
        self._armed = False
        self._fd = -1
        if _LIBC is not None:
            fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
            if fd >= 0:
                self._fd = fd
                loop.add_reader(fd, self._expired)

    @property
    def precise(self) -> bool:
        """True when backed by a timerfd (else by ``loop.call_later``)."""
        return self._fd >= 0

    @property
    def armed(self) -> bool:
        return self._armed

    def arm(self, deadline: float) -> None:
        self._armed = True
        if self._fd >= 0:
            self._settime(max(deadline, 1e-9))
            return
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop.call_later(max(0.0, deadline - time.monotonic()), self._expired)

    def cancel(self) -> None:
        self._armed = False
        if self._fd >= 0:
            self._settime(0.0)  # an all-zero value disarms
        elif self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def close(self) -> None:
        self.cancel()
        if self._fd >= 0:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1

    def _settime(self, deadline: float) -> None:
        assert _LIBC is not None
        seconds = int(deadline)
        value = _Timespec(seconds, int((deadline - seconds) * 1e9))
        spec = _Itimerspec(_Timespec(0, 0), value)
        if _LIBC.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")

    def _expired(self) -> None:
        if self._fd >= 0:
            try:
                os.read(self._fd, 8)  # the expiry count; re-arming or disarming clears it
            except BlockingIOError:
                return  # disarmed after it became readable
        self._handle = None
        if not self._armed:
            return
        self._armed = False
        self._callback()
