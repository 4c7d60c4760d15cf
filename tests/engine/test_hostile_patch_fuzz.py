"""Differential fuzzing of the patch parser and hunk engine against GNU patch.

Hypothesis makes a small base file and a unified diff of a change to it (valid, then broken on
purpose: hunk counts and starts off, lines dropped or retyped, markers and names mangled), wrapped
in the imgquilt format with the base's sha256 and, as the result pin, the bytes GNU patch writes.
Where `patch -p1 --dry-run` accepts the patch, imgquilt either produces the same bytes or refuses
it as bad input (exit 6: imgquilt allows no fuzz and no offset); where GNU refuses, imgquilt may
refuse as it likes. Never an exception outside the error tree.
"""
from __future__ import annotations

import difflib
import hashlib
import subprocess
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from imgquilt.engine.plan import plan_apply
from imgquilt.errors import ImgquiltError
from imgquilt.queue.queue import load_queue
from imgquilt.sources import open_source

LINES = st.lists(st.sampled_from([b"a\n", b"b\n", b"c\n", b"a\r\n", b"\n", b"x y\n", b"caf\xe9\n", b"-\n", b"+\n"]), max_size=12)


@st.composite
def cases(draw) -> tuple[bytes, bytes]:
    base_lines = draw(LINES)
    new_lines = list(base_lines)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["ins", "del", "rep"]))
        at = draw(st.integers(0, len(new_lines)))
        if op == "ins" or not new_lines:
            new_lines.insert(at, draw(LINES.filter(bool).map(lambda ls: ls[0])))
        elif op == "del":
            del new_lines[min(at, len(new_lines) - 1)]
        else:
            new_lines[min(at, len(new_lines) - 1)] = draw(st.sampled_from([b"Z\n", b"b\n", b"\xff\n"]))
    base = b"".join(base_lines)
    if base and draw(st.booleans()):
        base = base[:-1]  # no final newline
    new = b"".join(new_lines)
    ctx = draw(st.integers(0, 3))
    diff = b"".join(difflib.diff_bytes(difflib.unified_diff, base.splitlines(True), new.splitlines(True),
                                        b"a/f.txt", b"b/f.txt", n=ctx))
    diff = diff.replace(b"--- a/f.txt\n", b"--- a/f.txt\n", 1)
    lines = diff.splitlines(True)
    lines = [ln if ln.endswith(b"\n") else ln + b"\n\\ No newline at end of file\n" for ln in lines]
    for _ in range(draw(st.integers(0, 3))):  # break it on purpose
        if not lines:
            break
        k = draw(st.integers(0, len(lines) - 1))
        how = draw(st.sampled_from(["drop", "dup", "retype", "count", "start", "name", "junk", "nonl"]))
        ln = lines[k]
        if how == "drop":
            del lines[k]
        elif how == "dup":
            lines.insert(k, ln)
        elif how == "retype" and ln[:1] in (b" ", b"-", b"+"):
            lines[k] = draw(st.sampled_from([b" ", b"-", b"+"])) + ln[1:]
        elif how == "count" and ln.startswith(b"@@"):
            lines[k] = ln.replace(b",", b"," + str(draw(st.integers(0, 9))).encode(), 1)
        elif how == "start" and ln.startswith(b"@@"):
            lines[k] = ln.replace(b"@@ -", b"@@ -" + str(draw(st.integers(0, 9))).encode(), 1)
        elif how == "name" and ln.startswith((b"---", b"+++")):
            lines[k] = ln[:4] + draw(st.sampled_from([b"b/g.txt", b"f.txt", b"a/../f.txt", b"/dev/null", b"a/f.txt\t2020-01-01"])) + b"\n"
        elif how == "junk":
            lines.insert(k, draw(st.sampled_from([b"@@ junk\n", b"\\ No newline at end of file\n", b"garbage\n", b"@@ -1 +1 @@\n"])))
        elif how == "nonl":
            lines.insert(k + 1, b"\\ No newline at end of file\n")
    return base, b"".join(lines)


def _gnu(base: bytes, diff: bytes, work: Path) -> bytes | None:
    """What GNU patch makes of f.txt (None: it refuses, or it would touch another file)."""
    d = work / "gnu"
    d.mkdir()
    (d / "f.txt").write_bytes(base)
    (work / "p.diff").write_bytes(diff)
    args = ["patch", "-p1", "--batch", "--silent", "--no-backup-if-mismatch", "-r", "-", "-i", str(work / "p.diff")]
    dry = subprocess.run([*args, "--dry-run"], cwd=d, capture_output=True)
    if dry.returncode != 0:
        return None
    subprocess.run(args, cwd=d, capture_output=True)
    if sorted(p.name for p in d.iterdir()) != ["f.txt"]:
        return None
    return (d / "f.txt").read_bytes()


def _ours(base: bytes, diff: bytes, pin: bytes | None, work: Path) -> bytes:
    root = work / "root"
    root.mkdir()
    (root / "f.txt").write_bytes(base)
    q = work / "q"
    (q / "patches").mkdir(parents=True)
    sha = lambda b: hashlib.sha256(b).hexdigest()  # noqa: E731
    patch = (b"Description: fuzz\n\nIndex: f.txt\nBase-SHA256: " + sha(base).encode()
             + b"\nPatched-SHA256: " + sha(pin if pin is not None else b"?").encode() + b"\n" + diff)
    (q / "patches/p.patch").write_bytes(patch)
    (q / "series").write_bytes(b"p.patch\n")
    result = plan_apply(load_queue(q), open_source(f"rootfs:{root}"), None)
    return next(f.final for f in result.files if f.resolved == "f.txt")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cases())
def test_imgquilt_agrees_with_gnu_patch_or_refuses_as_bad_input(case) -> None:
    base, diff = case
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        gnu = _gnu(base, diff, work)
        try:
            ours = _ours(base, diff, gnu, work)
        except ImgquiltError as exc:
            event(f"imgquilt refuses (exit {exc.exit_code}); GNU {'accepts' if gnu is not None else 'refuses'}")
            if gnu is not None:
                assert exc.exit_code == 6, f"GNU patch accepts; imgquilt exit {exc.exit_code}: {exc.render()}\n{diff!r}"
            return
        event("both apply, same bytes")
        assert gnu is not None and ours == gnu, f"imgquilt {ours!r} vs GNU {gnu!r} for\n{diff!r}"
