"""What a path that is not a regular file is, in words, for the readers' and writers' one-line refusals."""
from __future__ import annotations

import stat

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def kind_name(mode) -> str:
    """'a directory', 'a character device', 'a FIFO', ... for an st_mode (else 'not a regular file')."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")
