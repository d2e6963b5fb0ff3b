"""Real disk-full faults for a data directory, two ways:

* ``TmpfsDisk``: the directory is on a small tmpfs mount; ``fill()`` takes every free
  byte with a filler file, ``free()`` deletes it (needs the right to mount: root here);
* ``ShimDisk``: a tiny ``LD_PRELOAD`` library, compiled by the test with the system C
  compiler, makes ``write``, ``fsync`` and ``fdatasync`` on the directory's files fail with
  ``ENOSPC`` while a flag file exists (processes started with ``env()``; needs ``cc``);
  ``fail_syncs()`` fails only the syncs, so written bytes reach the file anyway.

Either skips the test, with the reason, when the machine cannot do it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static int failing(int fd, int syncing) {
    const char *dir = getenv("ENOSPC_DIR"), *flag = getenv("ENOSPC_FLAG");
    const char *sync_flag = getenv("ENOSPC_SYNC_FLAG");
    if (!dir || !flag) return 0;
    if (access(flag, F_OK) != 0 && !(syncing && sync_flag && access(sync_flag, F_OK) == 0))
        return 0;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    size_t len = strlen(dir);
    return strncmp(path, dir, len) == 0 && (path[len] == '/' || path[len] == 0);
}

ssize_t write(int fd, const void *buf, size_t count) {
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    if (failing(fd, 0)) { errno = ENOSPC; return -1; }
    return real(fd, buf, count);
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    if (failing(fd, 1)) { errno = ENOSPC; return -1; }
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    if (failing(fd, 1)) { errno = ENOSPC; return -1; }
    return real(fd);
}
"""


class TmpfsDisk:
    """``data`` lives on a tmpfs of ``size_bytes`` mounted under ``root``."""

    kind = "tmpfs"

    def __init__(self, root: Path, size_bytes: int = 4 << 20) -> None:
        self.mount = root / "mnt"
        self.mount.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(self.mount)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
        self.data = self.mount / "data"
        self._filler = self.mount / "filler"

    def env(self) -> dict[str, str]:
        return {}

    def fill(self) -> None:
        """Take every free byte (the data directory's next write fails)."""
        fd = os.open(self._filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for size in (64 << 10, 4096, 512, 1):
                with contextlib.suppress(OSError):
                    while os.write(fd, b"\0" * size):
                        pass
        finally:
            os.close(fd)

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.mount)], check=False, capture_output=True)


class ShimDisk:
    """``data`` under ``root``; processes started with ``env()`` fail its writes while full."""

    kind = "shim"

    def __init__(self, root: Path) -> None:
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            pytest.skip("no C compiler for the ENOSPC shim")
        source = root / "enospc.c"
        source.write_text(_SHIM)
        self.library = root / "enospc.so"
        done = subprocess.run(
            [compiler, "-shared", "-fPIC", "-O2", "-o", str(self.library), str(source), "-ldl"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot build the ENOSPC shim: {done.stderr.strip()}")
        self.data = root / "data"
        self._flag = root / "disk-full"
        self._sync_flag = root / "syncs-fail"

    def env(self) -> dict[str, str]:
        return {
            "LD_PRELOAD": str(self.library),
            "ENOSPC_DIR": str(self.data),
            "ENOSPC_FLAG": str(self._flag),
            "ENOSPC_SYNC_FLAG": str(self._sync_flag),
        }

    def fill(self) -> None:
        self._flag.touch()

    def fail_syncs(self) -> None:
        self._sync_flag.touch()

    def free(self) -> None:
        self._flag.unlink(missing_ok=True)
        self._sync_flag.unlink(missing_ok=True)

    def close(self) -> None:
        self.free()


@contextlib.contextmanager
def disk(kind: str, root: Path) -> Iterator[TmpfsDisk | ShimDisk]:
    made: TmpfsDisk | ShimDisk = TmpfsDisk(root) if kind == "tmpfs" else ShimDisk(root)
    try:
        yield made
    finally:
        made.close()
