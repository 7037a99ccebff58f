"""Reading one file of untrusted input (a bundle, a node's spool): never through a link, never a FIFO, bounded.

    data, cut = read_regular(Path("bundle/raw/gpu001/uname-r.out"))    # bytes, whether cut at the limit
    data, cut = read_regular("uname-r.out", dir_fd=folder_fd)          # openat: no path walk per file
    data, cut = read_regular(path, single_link=True)                   # merge: a hard-linked file is refused

Anything else than a regular file, or a file that cannot be read, raises ``BundleFileError`` with
the reason; callers turn it into a finding for the host the file belongs to. ``single_link`` refuses a
file with more than one hard link (``HardLinkError``): a node that can write a shared spool could
otherwise link any file of that filesystem it can read into its bundle, and a merge would read it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

MAX_FILE_BYTES = 64 * 1024 * 1024  # one raw file read from a bundle (16x the default output cap)


class BundleFileError(OSError):
    """A file in a bundle that is refused: a link, not a regular file, unreadable."""


class HardLinkError(BundleFileError):
    """A file with more than one hard link, refused where ``single_link`` is asked for."""


def read_regular(path: Path | str, limit: int = MAX_FILE_BYTES, dir_fd: int | None = None,
                 single_link: bool = False) -> tuple[bytes, bool]:
    """The bytes of a regular file (never through a symbolic link) and whether they were cut at ``limit``.
    With ``dir_fd``, ``path`` is a name in that open folder (``openat``: no path walk per file); with
    ``single_link``, a file that has other hard links raises ``HardLinkError``."""
    try:  # O_NONBLOCK: a FIFO must not hang us
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BundleFileError("is a symbolic link (links in a bundle are never followed)") from None
        raise BundleFileError(f"cannot be read: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BundleFileError("is not a regular file")
        if single_link and info.st_nlink > 1:
            raise HardLinkError(f"has {info.st_nlink} hard links: a file linked from elsewhere is never read")
        data = _read_fd(fd, info.st_size, limit + 1)
    except OSError as exc:
        if isinstance(exc, BundleFileError):
            raise
        raise BundleFileError(f"cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return data[:limit], len(data) > limit


def _read_fd(fd: int, size: int, most: int) -> bytes:
    """Up to ``most`` bytes to end of file. Sized reads from ``fstat`` (a file may still grow or shrink):
    never a ``most``-sized buffer for a small file, as a buffered ``read(most)`` allocates. A read of a
    regular file that returns less than asked has reached its end: no further read to see it empty
    (one system call less per file, ~50 per host of a replay)."""
    chunks: list[bytes] = []
    got = 0
    while got < most:
        wanted = min(most - got, max(size - got + 1, 65536))
        chunk = os.read(fd, wanted)
        if chunk:
            chunks.append(chunk)
            got += len(chunk)
        if len(chunk) < wanted:
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
