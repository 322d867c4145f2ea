"""Paths named by outside data (a manifest's file keys, a store listing, a release version) kept inside a folder.

A manifest comes from a store or a mirror that whoever runs it controls; a key such as ``/home/u/.bashrc``,
``//host/share/x``, ``C:\\x``, ``a/../../x`` or a path through a symbolic link must never make a pull write
outside its destination. ``resolve_inside`` is the one check, used before anything is written.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath


class UnsafePathError(ValueError):
    """A key names a path outside the folder it must stay in (the message names the key and why)."""


_DRIVE = re.compile(r"^[A-Za-z]:")
_VERSION = re.compile(r"^v\d{8}(?:[._-][A-Za-z0-9]+)*$")


def check_key(key: str) -> str:
    """``key`` when it is a relative POSIX path of plain segments; raises ``UnsafePathError`` for an empty key, an
    absolute path (``/x``), a network path (``//host/x``), a drive (``C:x``), a backslash, a NUL or other control
    character, and an empty, ``.`` or ``..`` segment."""
    if not isinstance(key, str) or not key:
        raise UnsafePathError(f"{key!r}: an empty key")
    if key.startswith("/"):
        raise UnsafePathError(f"{key!r}: an absolute path")
    if _DRIVE.match(key):
        raise UnsafePathError(f"{key!r}: a drive-qualified path")
    if "\\" in key:
        raise UnsafePathError(f"{key!r}: a backslash (a Windows path separator)")
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise UnsafePathError(f"{key!r}: a control character")
    for seg in key.split("/"):
        if seg in ("", ".", ".."):
            raise UnsafePathError(f"{key!r}: an empty, '.' or '..' path segment")
    return key


def check_version(version: str) -> str:
    """A release version as the store names them (``vYYYYMMDD``, optionally with a suffix such as ``v20260701.1``);
    raises ``UnsafePathError`` for anything else, since it becomes a folder name."""
    if not isinstance(version, str) or not _VERSION.match(version):
        shown = repr(version) if len(repr(version)) <= 60 else repr(version)[:57] + "..."
        raise UnsafePathError(f"{shown} is not a release version (vYYYYMMDD)")
    return version


def resolve_inside(root: Path, key: str) -> Path:
    """The path of ``key`` under ``root``, checked to stay inside ``root`` once symbolic links are followed.

    Raises:
        UnsafePathError: ``check_key`` refuses the key, or an existing component of the path (the target
            included) is a symbolic link, or the resolved path is not below ``root``'s resolved path.
    """
    check_key(key)
    root_real = Path(os.path.realpath(root))
    path = refuse_links(root, key)
    real = Path(os.path.realpath(path))
    if real != root_real and root_real not in real.parents:
        raise UnsafePathError(f"{key!r}: resolves to {real}, outside {root_real}")
    return path


def refuse_links(root: Path, key: str) -> Path:
    """The path of ``key`` under ``root`` (``root`` itself may be a link: whoever names it chose it); raises
    ``UnsafePathError`` naming the first component below ``root`` that is a symbolic link. A store or a release
    folder is read and written only through plain files and folders: a link in one could point anywhere, and is
    never followed."""
    cur = Path(root)
    for part in PurePosixPath(key).parts:
        cur = cur / part
        if cur.is_symlink():
            raise UnsafePathError(f"{key!r}: {str(cur)!r} is a symbolic link (to {os.readlink(cur)!r}), refused: "
                                  "links in a store or release folder are not followed: replace the link by the "
                                  "file or folder it points to (in a store), or remove it (in a pull's --dest, which "
                                  "then writes the file itself)")
    return cur


def unwritable(folder: Path) -> str | None:
    """Why no file can be made in ``folder`` (the OS's reason: a probe file is made there and removed), or None
    when one can. Permission bits alone do not say it (root ignores them; a read-only file system does not)."""
    import tempfile

    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".lookbench-write-check-")
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(probe)
    return None
