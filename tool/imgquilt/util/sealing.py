"""The user's own key that seals imgquilt's journals, so no root, image or cloned queue can forge one.

A journal a crashed command left is acted on (rolled back or forward) only when its seal verifies:
an HMAC-SHA256 over the journal's canonical JSON, under a 32-byte random key that lives outside every
root and queue imgquilt is given: `$IMGQUILT_STATE_DIR/journal.key`, else
`$XDG_STATE_HOME/imgquilt/journal.key`, else `~/.local/state/imgquilt/journal.key`. An image, a
tarball or a cloned queue can ship any file and can guess an inode number (they are often handed out
in sequence); without the key it cannot make a seal that verifies.

The key is created on first use (mode 0600, linked into place whole, so two first runs agree on
one key) and used only while it is a regular file owned by the user, readable by no one else, in a
directory that is the user's alone (util/ownership.py, the test the shared cache passes too). Anything else there is refused (exit 6) rather than trusted or
replaced. Without a key, no journal verifies: a journal is then refused, never acted on.
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import stat
from contextlib import suppress
from pathlib import Path

from ..errors import UnsafeStateKey
from .atomic import write_new_at
from .ownership import problem_of

KEY_NAME = "journal.key"
_KEY_LEN = 32
_keys: dict[str, bytes] = {}


def state_home() -> Path:
    """Where the key lives (see the module docstring for the order)."""
    from ..settings import current

    explicit = current().state_dir
    if explicit:
        return Path(explicit).absolute()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "state"
    return base / "imgquilt"


def canonical(doc: dict) -> bytes:
    """The bytes a seal covers: the document without its seal, with sorted keys."""
    return json.dumps({k: v for k, v in doc.items() if k != "seal"}, sort_keys=True, ensure_ascii=True).encode()


def seal(doc: dict) -> str:
    """The seal of `doc` under the user's key (created on first use)."""
    return hmac.new(user_key(), canonical(doc), hashlib.sha256).hexdigest()


def user_key() -> bytes:
    """The user's own key (created on first use): what the cache's seals are derived from too."""
    key = _key(create=True)
    assert key is not None
    return key


def sealed_here(doc: dict) -> bool:
    """True when `doc` carries a seal made with the user's key; False without a key or a seal."""
    tag = doc.get("seal")
    if not isinstance(tag, str):
        return False
    key = _key(create=False)
    return key is not None and hmac.compare_digest(tag, hmac.new(key, canonical(doc), hashlib.sha256).hexdigest())


def _refuse(path: Path, problem: str) -> UnsafeStateKey:
    return UnsafeStateKey(
        f"imgquilt's journal key {path} is {problem}; imgquilt does not use it.",
        hint="It must be a 32-byte file of your own (mode 0600) in a directory only you can write. Remove it "
             "(a new one is made; journals sealed with the old one are then refused), or point IMGQUILT_STATE_DIR "
             "at a directory of your own.")


def _open_dir(home: Path, create: bool) -> int | None:
    if create:
        try:
            os.makedirs(home, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise UnsafeStateKey(
                f"imgquilt cannot make its state directory {home}: {exc.strerror or exc}.",
                hint="Point IMGQUILT_STATE_DIR at a writable directory of your own.") from None
    try:
        fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = "a symlink" if exc.errno in (errno.ELOOP, errno.ENOTDIR) else (exc.strerror or str(exc))
        raise _refuse(home / KEY_NAME, f"in a directory that is {why}") from None
    problem = problem_of(os.fstat(fd))
    if problem:
        os.close(fd)
        raise _refuse(home / KEY_NAME, f"in a directory that is {problem}")
    return fd


def _read_key(dfd: int, path: Path) -> bytes | None:
    try:
        fd = os.open(KEY_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refuse(path, "a symlink" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, "not a regular file")
        if st.st_uid != os.geteuid():
            raise _refuse(path, f"owned by another user (uid {st.st_uid})")
        if st.st_mode & 0o077:
            raise _refuse(path, f"open to others (mode {stat.S_IMODE(st.st_mode):04o})")
        key = os.read(fd, _KEY_LEN + 1)
    finally:
        os.close(fd)
    if len(key) != _KEY_LEN:
        raise _refuse(path, f"{len(key)} bytes long, not {_KEY_LEN}")
    return key


def _make_key(dfd: int, path: Path) -> bytes:
    tmp = f".{KEY_NAME}.{os.getpid()}.{os.urandom(8).hex()}"
    try:
        write_new_at(dfd, tmp, os.urandom(_KEY_LEN))  # mode 0600, whole on disk before it is linked
        try:
            os.link(tmp, KEY_NAME, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        except FileExistsError:
            pass  # another first run linked its key first: both use that one
        os.fsync(dfd)
    except OSError as exc:
        raise UnsafeStateKey(f"imgquilt cannot write its journal key {path}: {exc.strerror or exc}.",
                             hint="Point IMGQUILT_STATE_DIR at a writable directory of your own.") from None
    finally:
        with suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
    key = _read_key(dfd, path)
    assert key is not None
    return key


def _key(*, create: bool) -> bytes | None:
    home = state_home()
    memo = str(home)
    if memo in _keys:
        return _keys[memo]
    path = home / KEY_NAME
    dfd = _open_dir(home, create)
    if dfd is None:
        return None
    try:
        key = _read_key(dfd, path)
        if key is None and create:
            key = _make_key(dfd, path)
    finally:
        os.close(dfd)
    if key is not None:
        _keys[memo] = key
    return key
