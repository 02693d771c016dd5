"""A full disk said as such: `with writing(folder): ...` turns the error of a write that ran out of space into
`NoSpaceLeft` ("No space left on device writing FOLDER ..."), one line, whatever library was writing.

Libraries report a full disk in their own words: an OSError with errno ENOSPC (Python), an error whose text says
"No space left on device" (safetensors' SafetensorError "I/O error: No space left on device (os error 28)"), either
sometimes wrapped in another exception, or torch's zip writer's RuntimeError ("unexpected pos ...",
"PytorchStreamWriter
failed writing file ...", "iostream error") that names neither the cause nor the folder. The last ones are taken
for a full disk only when the folder's file system has less than `LOW_SPACE` bytes free; every other error is
raised as it was.
"""

from __future__ import annotations

import errno
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

LOW_SPACE = 1 << 30  # bytes free below which torch's vague writer errors are read as a full disk
TORCH_WRITE_ERRORS = ("unexpected pos", "PytorchStreamWriter failed writing", "iostream error")


class NoSpaceLeft(OSError):
    """A write ran out of disk space; the message names the folder."""


def _chain(err: BaseException) -> Iterator[BaseException]:
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def _free_bytes(folder: Path) -> int | None:
    for path in (folder, *folder.parents):
        if path.exists():
            try:
                return shutil.disk_usage(path).free
            except OSError:
                return None
    return None


def out_of_space(err: BaseException, folder: str | Path) -> bool:
    """Whether `err` (or an exception it came from) says the disk holding `folder` is full."""
    for cause in _chain(err):
        if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
            return True
        if "No space left on device" in str(cause):
            return True
    text = str(err)
    if isinstance(err, RuntimeError) and any(marker in text for marker in TORCH_WRITE_ERRORS):
        free = _free_bytes(Path(folder))
        return free is not None and free < LOW_SPACE
    return False


@contextmanager
def writing(folder: str | Path, what: str = "") -> Iterator[None]:
    """Run the block; a write that ran out of space raises `NoSpaceLeft` naming `folder` (and `what` it wrote)."""
    try:
        yield
    except NoSpaceLeft:
        raise
    except Exception as err:  # safetensors' SafetensorError is neither an OSError nor a RuntimeError
        if not out_of_space(err, folder):
            raise
        full = NoSpaceLeft(
            f"No space left on device writing {folder}{' (' + what + ')' if what else ''}: free "
            "space there, or write elsewhere, then run the same command again"
        )
        full.errno = errno.ENOSPC
        raise full from None
