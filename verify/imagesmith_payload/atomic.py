"""What the payload hands on (its report, a worker's result) is written atomically: a temporary file beside the
target, then ``os.replace``, so a reader never sees half a file.

Standard library only and no import from the package: the workers, started as scripts (torchrun, a plain
python), import it too.
"""

from __future__ import annotations

import os
import tempfile


def write_text(path: str, text: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
