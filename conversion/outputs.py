"""Atomic output directories: everything is written beside the target and
renamed into place at the end, so an error leaves nothing at the target.

Every file is fsynced before the rename and the parent directory after it:
once `path` exists, a crash cannot leave it with files the disk never received.
"""

import contextlib
import os
import shutil
import tempfile

from common import cli


class OutputExists(cli.UserError):
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
        _fsync_tree(tmp)
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
    _fsync(parent, os.O_RDONLY | os.O_DIRECTORY)


def _fsync_tree(root):
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            _fsync(os.path.join(directory, name), os.O_RDONLY)
        _fsync(directory, os.O_RDONLY | os.O_DIRECTORY)


def _fsync(path, flags):
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
