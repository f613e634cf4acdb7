"""Atomic output directories: everything is written beside the target and
renamed into place at the end, so an error leaves nothing at the target."""

import contextlib
import os
import shutil
import tempfile


class OutputExists(FileExistsError):
    pass


@contextlib.contextmanager
def atomic_dir(path, overwrite=False):
    """Yields a fresh temporary directory that becomes `path` on success."""
    path = os.path.abspath(path)
    if os.path.exists(path) and not overwrite:
        raise OutputExists(f"{path} exists; pass --overwrite to replace it")
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.", dir=parent)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if os.path.exists(path):
        old = tmp + ".old"
        os.rename(path, old)
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, path)
