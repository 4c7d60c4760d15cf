"""Findings of the Python check, in the shared cache: one SQLite file, `pycheck/findings.sqlite`.

A row is keyed by (checker version, the engine's key: sha256 over the checked file's name and bytes,
since pyflakes' verdict depends on the name too) and holds the findings with a seal over key,
version and findings under the cache key (cache.seal); a row whose seal does not verify (damaged,
restored from another cache, planted) is deleted and the file checked again. The version includes PYFLAKES_BUILTINS, which changes pyflakes' verdicts. A first run of a large queue stores hundreds of findings: one transaction, not hundreds of
files (creating a file costs a millisecond on some disks, more than checking it). The file is a
cache: it is written without fsync (a row a crash mangles fails its checksum), and a file that is
not a database, or is a link or not a regular file, is removed and started afresh, never followed.
"""
from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Iterable

from ..cache import cache_root
from ..cache.seal import entry_checker, entry_sealer
from ..cache.trust import CacheDir

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_BATCH = 500  # keys per SELECT (SQLite's variable limit is 999 on old builds)


class PyCheckResults:
    """A pycheck.Memo kept in the shared cache, for one checker version."""

    def __init__(self, version: str, root: Path | None = None) -> None:
        builtins = os.environ.get("PYFLAKES_BUILTINS")
        self.version = version if builtins is None else f"{version}-builtins:{builtins}"
        self.path = CacheDir(root or cache_root(), "pycheck").path / "findings.sqlite"
        self._db = None
        self._off = False  # the cache failed in this process: check everything, store nothing

    def _connect(self):
        import sqlite3

        if self._db is not None or self._off:
            return self._db
        for attempt in range(2):
            try:
                try:
                    st = os.lstat(self.path)
                    if not stat.S_ISREG(st.st_mode):
                        raise sqlite3.DatabaseError("not a regular file")
                except FileNotFoundError:
                    pass
                db = sqlite3.connect(self.path, timeout=10, isolation_level=None, check_same_thread=False)
                try:
                    db.execute("PRAGMA synchronous=OFF")
                    db.execute("CREATE TABLE IF NOT EXISTS findings (version TEXT NOT NULL, key TEXT NOT NULL, "
                               "errors TEXT NOT NULL, sum TEXT NOT NULL, PRIMARY KEY (version, key)) WITHOUT ROWID")
                except BaseException:
                    db.close()
                    raise
                self._db = db
                return db
            except sqlite3.Error:
                if attempt == 0:
                    try:
                        os.unlink(self.path)  # not ours, or damaged: start afresh
                    except OSError:
                        break
            except OSError:
                break
        self._off = True
        return None

    def get_many(self, keys: Iterable[str]) -> dict[str, list[str]]:
        import sqlite3

        wanted = [k for k in dict.fromkeys(keys) if _HEX64.match(k)]
        db = self._connect() if wanted else None
        if db is None:
            return {}
        found: dict[str, list[str]] = {}
        bad: list[str] = []
        sealed = entry_checker("pycheck")
        try:
            for i in range(0, len(wanted), _BATCH):
                part = wanted[i:i + _BATCH]
                rows = db.execute(f"SELECT key, errors, sum FROM findings WHERE version = ? AND key IN "
                                  f"({','.join('?' * len(part))})", [self.version, *part]).fetchall()
                for key, raw, total in rows:
                    # the seal covers the text stored (put_many seals json.dumps of the findings and stores that
                    # text): checked as read, not re-encoded; a row whose text does not decode is not believed
                    errors = _decode(raw) if isinstance(raw, str) and sealed(total, key, self.version, raw) else None
                    if errors is not None:
                        found[key] = errors
                    else:
                        bad.append(key)
            if bad:  # damaged: check those files again
                db.executemany("DELETE FROM findings WHERE version = ? AND key = ?", [(self.version, k) for k in bad])
        except sqlite3.Error as exc:
            self._drop(exc)
            return {}
        return found

    def put_many(self, entries: dict[str, list[str]]) -> None:
        import sqlite3

        seal = entry_sealer("pycheck")  # the row's seal: one restored from another cache, or planted, is not believed
        rows = [(self.version, k, text, seal(k, self.version, text))
                for k, e in entries.items() if _HEX64.match(k) for text in (json.dumps(e),)]
        if any(r[3] is None for r in rows):
            return  # no cache key: nothing stored would be believed
        db = self._connect() if rows else None
        if db is None:
            return
        try:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT OR REPLACE INTO findings (version, key, errors, sum) VALUES (?, ?, ?, ?)", rows)
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._drop(exc)

    def _drop(self, exc: Exception) -> None:
        """A database error mid-use: stop using the cache in this process, and remove a damaged file
        (not a busy one: another process holds it) so the next run starts afresh."""
        import sqlite3

        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
        self._db = None
        self._off = True
        if type(exc) is sqlite3.DatabaseError:  # "malformed", "not a database"; not OperationalError (busy)
            try:
                os.unlink(self.path)
            except OSError:
                pass


def _decode(raw: object) -> list[str] | None:
    try:
        errors = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    if isinstance(errors, list) and all(isinstance(e, str) for e in errors):
        return errors
    return None
