"""A queue of three patches on one module, and hand edits of it, for the rehash and rename tests."""

from __future__ import annotations

from pathlib import Path

from support.qtools import empty_queue, write_patch

MOD = "usr/lib/app/mod.py"


BASE = b"".join(f"LINE_{i:02d} = {i}\n".encode() for i in range(1, 31))


P1 = BASE.replace(b"LINE_03 = 3\n", b"LINE_03 = 3  # one\n")


P2 = P1.replace(b"LINE_20 = 20\n", b"LINE_20 = 20  # two\n")


P3 = P2.replace(b"LINE_27 = 27\n", b"LINE_27 = 27  # three\n")


NAMES = ["01-one.patch", "02-two.patch", "03-three.patch"]


def chain(image: Path, q: Path) -> Path:
    """An image holding MOD and a queue of the three-patch chain on it (no lock yet)."""
    (image / "usr/lib/app").mkdir(parents=True)
    (image / MOD).write_bytes(BASE)
    q = empty_queue(q)
    for name, old, new in zip(NAMES, (BASE, P1, P2), (P1, P2, P3)):
        write_patch(q, name, [(MOD, old, new)])
    return q


def hand_edit(q: Path, name: str, old: bytes, new: bytes) -> None:
    p = q / "patches" / name
    data = p.read_bytes()
    assert old in data, (name, old)
    p.write_bytes(data.replace(old, new))
