"""The audit scenario (a base, a queue of patches, the tree now) and its check, shared by the audit tests."""

from __future__ import annotations

from pathlib import Path

from support.qtools import write_patch


def lines(prefix: str, n: int = 12) -> bytes:
    return b"".join(f"{prefix} line {i}\n".encode() for i in range(1, n + 1))


def edit(data: bytes, old: bytes, new: bytes) -> bytes:
    assert data.count(old) == 1, old
    return data.replace(old, new)


# --- the acceptance image: every state at once -------------------------------------------------
A, B, C, D, E, F, G1, G2 = (lines(x) for x in ("a", "b", "c", "d", "e", "f", "g1", "g2"))


SCENARIO_PATCHES = [
    ("0001-live-a.patch", [("etc/a.conf", A, edit(A, b"a line 3\n", b"a line 3 patched\n"))]),
    ("0002-live-b.patch", [("etc/b.conf", B, edit(B, b"b line 9\n", b"b line 9 patched\n"))]),
    ("0003-pending-c.patch", [("etc/c.conf", C, edit(C, b"c line 5\n", b"c line 5 patched\n"))]),
    ("0004-drifted-live-d.patch", [("usr/lib/app/d.py", D, edit(D, b"d line 6\n", b"d line 6 patched\n"))]),
    ("0005-drifted-e.patch", [("usr/lib/app/e.py", E, edit(E, b"e line 6\n", b"e line 6 patched\n"))]),
    ("0006-missing-f.patch", [("etc/f.conf", F, edit(F, b"f line 2\n", b"f line 2 patched\n"))]),
    ("0007-partial-g.patch", [
        ("etc/g1.conf", G1, edit(G1, b"g1 line 4\n", b"g1 line 4 patched\n")),
        ("etc/g2.conf", G2, edit(G2, b"g2 line 4\n", b"g2 line 4 patched\n")),
    ]),
]


# The base image: every base as the patches pin it.
SCENARIO_BASE = {path: old for _, ch in SCENARIO_PATCHES for path, old, _ in ch}


# What the audited filesystem holds (None: deleted, e.g. whited out by an upper layer).
SCENARIO_NOW: dict[str, bytes | None] = {
    "etc/a.conf": SCENARIO_PATCHES[0][1][0][2],
    "etc/b.conf": SCENARIO_PATCHES[1][1][0][2],
    "etc/c.conf": C,
    # patched, and changed elsewhere: two lines above the hunk shift it, one line at the end
    "usr/lib/app/d.py": b"# vendored\n# more\n" + SCENARIO_PATCHES[3][1][0][2] + b"d line 13\n",
    # changed elsewhere and the change is not there
    "usr/lib/app/e.py": edit(E, b"e line 1\n", b"e line 1 local\n"),
    "etc/f.conf": None,
    "etc/g1.conf": SCENARIO_PATCHES[6][1][0][2],
    "etc/g2.conf": G2,
}


SCENARIO_EXPECT = {
    "0001-live-a.patch": ("live", ["live"]),
    "0002-live-b.patch": ("live", ["live"]),
    "0003-pending-c.patch": ("pending", ["pending"]),
    "0004-drifted-live-d.patch": ("drifted-live", ["drifted-live"]),
    "0005-drifted-e.patch": ("drifted", ["drifted"]),
    "0006-missing-f.patch": ("missing", ["missing"]),
    "0007-partial-g.patch": ("partial", ["live", "pending"]),
}


def write_queue(q: Path, patches) -> Path:
    q.mkdir(parents=True, exist_ok=True)
    for name, ch in patches:
        write_patch(q, name, ch)
    return q


def write_tree(root: Path, files: dict[str, bytes | None]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for path, data in files.items():
        if data is None:
            continue
        p = root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


def check_scenario(doc: dict) -> None:
    """The acceptance assertions, on an audit JSON document."""
    got = {p["name"]: (p["state"], [f["state"] for f in p["files"]]) for p in doc["patches"]}
    assert got == SCENARIO_EXPECT
    assert doc["summary"] == {"live": 2, "pending": 1, "drifted-live": 1, "drifted": 1, "missing": 1, "partial": 1}
    by_path = {f["path"]: f for p in doc["patches"] for f in p["files"]}
    assert by_path["etc/f.conf"]["actual"] == "absent"
    for path, f in by_path.items():
        assert f["resolved"] == path
        assert set(f) >= {"path", "resolved", "state", "expected_base", "expected_patched", "actual"}
