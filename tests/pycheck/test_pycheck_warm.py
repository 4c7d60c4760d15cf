"""The Python checks remember (issue 37, point 1), as a user sees it: a warm run gives the same bytes,
verdicts, findings and notes as a cold one; a row of the shared cache that does not carry its seal
is not believed; a changed module is checked again."""
from __future__ import annotations

import sqlite3
from pathlib import Path

from support.imagetools import build_oci, file
from support.qtools import imgquilt, write_patch

SITE = "usr/local/lib/python3.11/site-packages"
LIB = b"def call(a):\n    pass\n\ndef __getattr__(name):\n    pass\n"
DYN = b"def __getattr__(name):\n    pass\n"


def _setup(tmp_path: Path) -> tuple[str, Path]:
    layout = tmp_path / "img"
    build_oci(layout, [[file(f"{SITE}/lib.py", "def call(a):\n    pass\n"), file(f"{SITE}/dyn.py", DYN.decode()),
                        file(f"{SITE}/a.py", "X = 1\n"), file(f"{SITE}/b.py", "Y = 1\n")]], tag="v1")
    q = tmp_path / "q"
    q.mkdir()
    # a.py gains a call that fits and a "cannot tell" (dyn defines __getattr__); b.py a plain change
    write_patch(q, "0001-a.patch", [(f"{SITE}/a.py", b"X = 1\n", b"X = 1\nfrom lib import call\nfrom dyn import thing\ncall(1)\nthing()\n")])
    write_patch(q, "0002-b.patch", [(f"{SITE}/b.py", b"Y = 1\n", b"Y = 2\n")])
    return f"oci:{layout}:v1", q


def test_warm_and_cold_give_the_same_bytes_verdicts_and_notes(tmp_path: Path, cli_env) -> None:
    ref, q = _setup(tmp_path)
    env = dict(cli_env)
    cold = imgquilt("--json", "apply", "--image", ref, "--layer", str(tmp_path / "cold.tar.gz"), cwd=q, env=env, check=0)
    rows = sqlite3.connect(Path(env["IMGQUILT_CACHE_DIR"]) / "pycheck" / "findings.sqlite").execute(
        "SELECT count(*) FROM findings").fetchone()[0]
    assert rows >= 3  # the name check's rows and the cross-module check's
    warm = imgquilt("--json", "apply", "--image", ref, "--layer", str(tmp_path / "warm.tar.gz"), cwd=q, env=env, check=0)
    assert (tmp_path / "cold.tar.gz").read_bytes() == (tmp_path / "warm.tar.gz").read_bytes()
    strip = lambda out: out.replace("warm.tar.gz", "X").replace("cold.tar.gz", "X")  # noqa: E731
    assert strip(cold.out) == strip(warm.out) and "defines a module __getattr__" in cold.out
    # a refusal the same way: the call no longer fits the image's lib (a changed module: checked again)
    q2 = tmp_path / "q2"
    q2.mkdir()
    write_patch(q2, "0001-a.patch", [(f"{SITE}/a.py", b"X = 1\n", b"X = 1\nfrom lib import call\ncall(1, 2)\n")])
    first = imgquilt("lock", "--image", ref, cwd=q2, env=env, check=3)
    again = imgquilt("lock", "--image", ref, cwd=q2, env=env, check=3)
    assert first.out == again.out and first.err == again.err
    assert "call() takes 1 positional argument but 2 were given" in first.out + first.err


def test_a_forged_row_in_the_shared_cache_is_not_believed(tmp_path: Path, cli_env) -> None:
    """Every row of the cross-module check is rewritten to say "no findings" (keeping its old seal,
    as anyone who can write the cache file could): the next run still refuses."""
    ref, _ = _setup(tmp_path)
    env = dict(cli_env)
    q2 = tmp_path / "q2"
    q2.mkdir()
    write_patch(q2, "0001-a.patch", [(f"{SITE}/a.py", b"X = 1\n", b"X = 1\nfrom lib import call\ncall(1, 2)\n")])
    imgquilt("lock", "--image", ref, cwd=q2, env=env, check=3)
    db = sqlite3.connect(Path(env["IMGQUILT_CACHE_DIR"]) / "pycheck" / "findings.sqlite")
    forged = 0
    for key, raw in db.execute("SELECT key, errors FROM findings").fetchall():
        if "seen" in raw:
            import json

            doc = json.loads(json.loads(raw)[0])
            doc["files"] = []
            db.execute("UPDATE findings SET errors = ? WHERE key = ?", (json.dumps([json.dumps(doc)]), key))
            forged += 1
    db.commit()
    assert forged >= 1
    r = imgquilt("lock", "--image", ref, cwd=q2, env=env, check=3)
    assert "call() takes 1 positional argument but 2 were given" in r.out + r.err


def test_refresh_keeps_its_cross_module_answers_in_the_shared_cache(tmp_path: Path, cli_env) -> None:
    """A refresh of a file that imports a module of the image leaves its row: the next refresh of the
    same patch checks again only what changed (and a row that names a changed module is not taken)."""
    ref, _ = _setup(tmp_path)
    env = dict(cli_env)
    q = tmp_path / "w"
    q.mkdir()
    imgquilt("init", cwd=q, env=env, check=0)
    imgquilt("new", "0001-a.patch", cwd=q, env=env, check=0)
    imgquilt("add", "--image", ref, f"{SITE}/a.py", cwd=q, env=env, check=0)
    (q / ".imgquilt/work" / SITE / "a.py").write_text("X = 1\nfrom lib import call\ncall(1)\n")
    imgquilt("refresh", cwd=q, env=env, check=0)
    db = Path(env["IMGQUILT_CACHE_DIR"]) / "pycheck" / "findings.sqlite"
    rows = [r for (r,) in sqlite3.connect(db).execute("SELECT errors FROM findings") if "seen" in r]
    assert len(rows) == 1 and "lib.py" in rows[0]
    (q / ".imgquilt/work" / SITE / "a.py").write_text("X = 1\nfrom lib import call\ncall(1, 2)\n")
    r = imgquilt("refresh", cwd=q, env=env, check=3)
    assert "call() takes 1 positional argument but 2 were given" in r.err
