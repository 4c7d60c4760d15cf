"""Whether a directory is the user's alone: the test imgquilt applies, as ssh does to ~/.ssh, before it
trusts what a directory holds (the shared cache, the journal key's directory)."""
from __future__ import annotations

import os
import stat


def _group_is_private(gid: int) -> bool:
    """The user's own group (user private groups, umask 002): no one else is in it."""
    if gid != os.getegid():
        return False
    try:
        import grp
        import pwd

        user = pwd.getpwuid(os.geteuid()).pw_name
        members = grp.getgrgid(gid).gr_mem
    except (ImportError, KeyError):
        return False
    return all(m == user for m in members)


def problem_of(st: os.stat_result, *, ancestor: bool = False) -> str | None:
    """Why a directory with this lstat is not the user's alone, or None."""
    if stat.S_ISLNK(st.st_mode):
        return "a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_uid not in (os.geteuid(), 0):
        return f"owned by another user (uid {st.st_uid})"
    if st.st_mode & stat.S_IWOTH and not (ancestor and st.st_mode & stat.S_ISVTX):
        return f"writable by every user (mode {stat.S_IMODE(st.st_mode):04o})"
    if st.st_mode & stat.S_IWGRP and not (ancestor and st.st_mode & stat.S_ISVTX) and not _group_is_private(st.st_gid):
        return f"writable by its group (gid {st.st_gid}, mode {stat.S_IMODE(st.st_mode):04o})"
    return None
