"""``SyncHelper``: a helper process that ``fdatasync``s files for an event loop.

Why a process: the Thrift server's event loop must not answer a call before its log
edit is on disk, but while one ``fdatasync`` runs (a few hundred microseconds) it should
go on decoding and applying the calls that arrive, so that they join the next batch. A
thread could run the sync, but it would then need the GIL to say it is done, and a
thread waiting for the GIL of a busy event loop waits up to the switch interval (5 ms).
A process has its own interpreter; the loop learns of the sync's end through a socket it
watches like any other (``loop.add_reader(helper.fileno(), ...)``).

Protocol over a ``SOCK_SEQPACKET`` socket pair: each request is one message carrying
the file's descriptor (``SCM_RIGHTS``: the helper syncs the very file, whatever its
name has become); the answer is ``K`` or ``E`` + the error text. At most one request is
outstanding. ``fdatasync`` through a duplicate descriptor makes the same file's data
durable. The helper ignores SIGINT (a Ctrl-C reaches the whole process group; the owner
decides when to stop). If the owner dies, the helper reads end-of-file and exits; if
the helper dies, ``request`` and ``result()`` report ``HelperGoneError`` (the owner
syncs by itself from then on); a failed ``fdatasync`` is a ``TxStorageError``, which
fails the log.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys

from txn.errors import TxStorageError

__all__ = ["HelperGoneError", "SyncHelper"]

_HELPER = """
import os, signal, socket, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the owner's; EOF stops us
conn = socket.socket(fileno=int(sys.argv[1]))
while True:
    try:
        message, fds, _flags, _address = socket.recv_fds(conn, 16, 4)
    except OSError:
        break
    if not message:
        break
    try:
        os.fdatasync(fds[0])
        reply = b"K"
    except (OSError, IndexError) as exc:
        reply = b"E" + repr(exc).encode()[:4000]
    for fd in fds:
        os.close(fd)
    conn.send(reply)
"""


class HelperGoneError(TxStorageError):
    """The helper process is gone: whether the outstanding sync ran is unknown (sync
    again), but nothing says the file cannot be synced."""


class SyncHelper:
    """See the module docstring. Use from one thread."""

    def __init__(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _HELPER, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            mine.close()
            raise TxStorageError(f"cannot start the log sync helper: {exc}") from exc
        finally:
            theirs.close()
        self._sock = mine
        self._outstanding = False

    def fileno(self) -> int:
        """Readable when the outstanding request's answer has arrived."""
        return self._sock.fileno()

    def request(self, fd: int) -> None:
        """Ask for ``fdatasync(fd)``; the answer comes through ``result()``."""
        if self._outstanding:
            raise RuntimeError("a sync is already outstanding")
        try:
            socket.send_fds(self._sock, [b"S"], [fd])
        except OSError as exc:
            raise HelperGoneError(f"the log sync helper is gone: {exc}") from exc
        self._outstanding = True

    def result(self) -> TxStorageError | None:
        """The outstanding request's outcome (call when ``fileno()`` is readable): None
        when the file is synced, ``HelperGoneError`` when the helper is gone, else the
        sync's failure."""
        self._outstanding = False
        try:
            reply = self._sock.recv(8192)
        except OSError as exc:
            return HelperGoneError(f"the log sync helper is gone: {exc}")
        if reply == b"K":
            return None
        if not reply:
            return HelperGoneError("the log sync helper exited")
        return TxStorageError(f"cannot sync the log: {reply[1:].decode(errors='replace')}")

    def sync(self, fd: int) -> None:
        """``request`` and wait for the answer; raises ``TxStorageError``."""
        self.request(fd)
        failure = self.result()
        if failure is not None:
            raise failure

    def close(self) -> None:
        """Stop the helper (it exits on end-of-file)."""
        self._sock.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(10)
