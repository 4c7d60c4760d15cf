"""Names: the variable names a shell takes, and the nearest of a set of names to a mistyped one
(`guard 0002 +rcom`: did you mean rocm?)."""
from __future__ import annotations

import re
from typing import Iterable

ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # an environment variable's name, as a shell takes it

NEAR = 2  # at most this many single-character edits away counts as a likely typo


def edits(a: str, b: str) -> int:
    """Levenshtein distance (insert, delete, substitute, each 1; a swap of neighbours counts 1 too)."""
    if a == b:
        return 0
    prev2: list[int] | None = None
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cost = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if prev2 is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cost = min(cost, prev2[j - 2] + 1)
            cur.append(cost)
        prev2, prev = prev, cur
    return prev[-1]


def nearest(name: str, names: Iterable[str], within: int = NEAR) -> str | None:
    """The closest of `names` to `name` within `within` edits (ties: the first given), or None."""
    best: tuple[int, str] | None = None
    for n in dict.fromkeys(names):
        if n == name:
            continue
        d = edits(name.lower(), n.lower())
        if d <= within and (best is None or d < best[0]):
            best = (d, n)
    return best[1] if best else None


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """` Did you mean X?` (with its leading blank) or the empty string."""
    near = nearest(name, names)
    return f" Did you mean {near!r}?" if near else ""
