"""What upstream changed under a patch: the regions its hunks sit in, and how each changed between
the patch's old base and its new base.

A region of a `.py` file is the innermost function or class (by Python AST) that holds the lines a
hunk removes (or, for a hunk that only adds, the line it adds before); a hunk at module level, and
every hunk of another file, has a region of lines: the lines it changes and its context, named like
git's hunk heading (the nearest line above the change that starts with a letter, `_`, `$` or `[`,
`key = value` lines left out).

Between the old and the new base a function or class region is looked up by its qualified name:
- the same name in the new base: "changed" when its text differs, with the parameters it gained and
  lost (a function's; a class's `__init__`'s) and how many lines were added and removed;
- not there, but the new base imports that name from another module: "moved" to that module (the
  caller names its file when it can read it);
- neither: "removed".
A region of lines is followed through the line diff of the two bases: "changed" when an edit of
upstream's touches it. Bytes in, values out: nothing here reads a filesystem.
"""
from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass, field

from ..queue.hunks import split_lines
from ..queue.patchfile import FileSection
from .pyiface import Unreadable, parse, signature_of

FUNCTION, CLASS, LINES = "function", "class", "lines"
CHANGED, MOVED, REMOVED = "changed", "moved", "removed"
_HEADING = re.compile(rb"^[A-Za-z_$\[]")
_ASSIGNMENT = re.compile(rb"^[\w.$-]+\s*[:+-]?=")  # `key = value`: a line of a region, not its name
DIFF_CAP = 400  # lines of upstream diff kept per region (the report says when it cut)


@dataclass(frozen=True)
class Region:
    """Where a hunk sits in the patch's base."""

    kind: str  # FUNCTION | CLASS | LINES
    name: str  # qualified name ("FusedMoE.forward"), or the heading of a region of lines
    start: int  # first and last line in the base (1-based, decorators included)
    end: int


@dataclass(frozen=True)
class RegionChange:
    """What upstream did to one region between the old and the new base."""

    path: str
    region: Region
    change: str  # CHANGED | MOVED | REMOVED
    params_added: tuple[str, ...] = ()
    params_removed: tuple[str, ...] = ()
    lines_added: int = 0
    lines_removed: int = 0
    moved_to: str | None = None  # MOVED: the module (dotted) it is imported from now
    moved_path: str | None = None  # ... and its file, when known
    new_start: int | None = None  # where the region is in the new base
    diff: str = field(default="", compare=False)  # upstream's unified diff of the region

    def summary(self) -> str:
        what = f"{self.region.kind} {self.region.name}" if self.region.kind != LINES else f"lines {self.region.start}-{self.region.end}" + (
            f" ({self.region.name})" if self.region.name else "")
        if self.change == REMOVED:
            return f"{what} removed"
        if self.change == MOVED:
            return f"{what} moved to {self.moved_path or self.moved_to}"
        parts = []
        if self.params_added:
            parts.append("new parameter" + ("s " if len(self.params_added) > 1 else " ") + ", ".join(self.params_added))
        if self.params_removed:
            parts.append("parameter" + ("s " if len(self.params_removed) > 1 else " ") + ", ".join(self.params_removed) + " removed")
        parts.append(f"+{self.lines_added}/-{self.lines_removed} lines")
        return f"{what}: " + ", ".join(parts)

    def to_json(self) -> dict:
        return {"path": self.path, "kind": self.region.kind, "name": self.region.name, "old_lines": [self.region.start, self.region.end],
                "new_line": self.new_start, "change": self.change, "params_added": list(self.params_added),
                "params_removed": list(self.params_removed), "lines_added": self.lines_added, "lines_removed": self.lines_removed,
                "moved_to": self.moved_to, "moved_path": self.moved_path, "diff": self.diff}

    @classmethod
    def from_json(cls, doc: dict) -> RegionChange:
        start, end = doc["old_lines"]
        return cls(doc["path"], Region(doc["kind"], doc["name"], int(start), int(end)), doc["change"], tuple(doc["params_added"]),
                   tuple(doc["params_removed"]), int(doc["lines_added"]), int(doc["lines_removed"]), doc["moved_to"],
                   doc["moved_path"], doc["new_line"], doc.get("diff", ""))


@dataclass(frozen=True)
class _Def:
    kind: str
    name: str
    start: int
    end: int
    params: tuple[str, ...] | None  # a function's, a class's __init__'s (without self)


def _defs(tree: ast.Module) -> list[_Def]:
    out: list[_Def] = []

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for st in body:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                start = min([st.lineno] + [d.lineno for d in st.decorator_list])
                qual = f"{prefix}{st.name}"
                if isinstance(st, ast.ClassDef):
                    init = next((x for x in st.body if isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef)) and x.name == "__init__"), None)
                    params = tuple(signature_of(init).params()[1:]) if init is not None else None
                    out.append(_Def(CLASS, qual, start, st.end_lineno or st.lineno, params))
                else:
                    out.append(_Def(FUNCTION, qual, start, st.end_lineno or st.lineno, tuple(signature_of(st).params())))
                walk(st.body, qual + ".")
            else:
                for attr in ("body", "orelse", "finalbody", "handlers"):
                    inner = getattr(st, attr, None)
                    if isinstance(inner, list):
                        walk([x for x in inner if isinstance(x, ast.stmt)] + [y for h in inner if isinstance(h, ast.ExceptHandler) for y in h.body], prefix)

    walk(tree.body, "")
    return out


def _tree(data: bytes | None, path: str) -> ast.Module | None:
    if data is None or not path.endswith(".py"):
        return None
    try:
        return parse(data, path)
    except Unreadable:
        return None


def hunk_lines(section: FileSection) -> list[tuple[list[int], int, int]]:
    """Per hunk: the old lines it changes (for a hunk that only adds, the line it adds before), and
    the first and last old line it covers with its context."""
    out = []
    for h in section.hunks:
        line = h.old_start if h.old_len else h.old_start + 1
        changed: list[int] = []
        prev = " "
        for hl in h.lines:
            if hl.kind == "-":
                changed.append(line)
                line += 1
            elif hl.kind == " ":
                line += 1
            elif prev == " ":
                changed.append(line)  # lines only added: they go before this old line
            prev = hl.kind
        first = max(1, h.old_start)
        out.append((sorted(set(changed)) or [first], first, max(first, first + h.old_len - 1)))
    return out


def regions_of(section: FileSection, base: bytes | None) -> list[Region]:
    """The regions the section's hunks sit in, in its base (one per region, in file order): the
    innermost function or class of each line a hunk changes; lines outside any, a region of lines."""
    if base is None or not section.hunks:
        return []
    tree = _tree(base, section.path)
    defs = _defs(tree) if tree is not None else []
    lines = split_lines(base)
    found: dict[tuple, Region] = {}
    for changed, ctx_lo, ctx_hi in hunk_lines(section):
        loose: list[int] = []
        for ln in changed:
            holders = [d for d in defs if d.start <= ln <= d.end]
            if holders:
                d = min(holders, key=lambda x: x.end - x.start)
                found.setdefault((d.kind, d.name), Region(d.kind, d.name, d.start, d.end))
            else:
                loose.append(ln)
        if loose:
            lo, hi = max(ctx_lo, min(loose) - 3), min(ctx_hi, max(loose) + 3) if ctx_hi >= max(loose) else max(loose)
            lo = min(lo, min(loose))
            found.setdefault((LINES, lo, hi), Region(LINES, _heading(lines, min(loose)), lo, hi))
    return sorted(found.values(), key=lambda r: (r.start, r.end))


def _heading(lines: list[bytes], line: int) -> str:
    """A region of lines' name, as git's hunk heading: the nearest line above `line` (the first one
    changed) that starts with a letter, `_`, `$` or `[` and is no `key = value` line (a definition, an
    ini/TOML section, a YAML key)."""
    for i in range(min(line - 1, len(lines)) - 1, -1, -1):
        if _HEADING.match(lines[i]) and not _ASSIGNMENT.match(lines[i]):
            return lines[i].decode("utf-8", "replace").rstrip("\r\n")[:80]
    return ""


def upstream_changes(path: str, regions: list[Region], old: bytes | None, new: bytes | None, *, new_path: str | None = None) -> list[RegionChange]:
    """What changed in each region between the old base and the new base (unchanged regions left out)."""
    if old == new or old is None:
        return []
    new_path = new_path or path
    old_lines = split_lines(old)
    new_lines = split_lines(new) if new is not None else []
    old_tree, new_tree = _tree(old, path), _tree(new, new_path)
    old_defs = {(d.kind, d.name): d for d in _defs(old_tree)} if old_tree is not None else {}
    new_defs = {(d.kind, d.name): d for d in _defs(new_tree)} if new_tree is not None else {}
    matcher: difflib.SequenceMatcher | None = None
    out: list[RegionChange] = []
    for r in regions:
        if r.kind != LINES and (r.kind, r.name) in old_defs and new is not None:
            od = old_defs[(r.kind, r.name)]
            nd = new_defs.get((r.kind, r.name))
            if nd is None:
                moved = _imported_from(new_tree, r.name.split(".")[0]) if new_tree is not None else None
                if moved is not None:
                    out.append(RegionChange(path, r, MOVED, moved_to=moved))
                elif new_tree is not None:
                    out.append(RegionChange(path, r, REMOVED))
                continue
            a, b = old_lines[od.start - 1: od.end], new_lines[nd.start - 1: nd.end]
            if a == b:
                continue
            added, removed = _counts(a, b)
            pa, pr = _param_changes(od.params, nd.params)
            out.append(RegionChange(path, r, CHANGED, pa, pr, added, removed, new_start=nd.start,
                                    diff=_diff(a, b, path, new_path, od.start, nd.start)))
            continue
        if matcher is None:
            matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
        hit = [op for op in matcher.get_opcodes() if _touches(op, r)]
        if not hit:
            continue
        added = sum(j2 - j1 for _, _, _, j1, j2 in hit)
        removed = sum(i2 - i1 for _, i1, i2, _, _ in hit)
        nstart = _map_line(matcher, r.start)
        nend = _map_line(matcher, r.end + 1) - 1
        out.append(RegionChange(path, r, CHANGED, (), (), added, removed, new_start=nstart,
                                diff=_diff(old_lines[r.start - 1: r.end], new_lines[nstart - 1: max(nstart - 1, nend)], path, new_path,
                                           r.start, nstart)))
    return out


def _touches(op: tuple, r: Region) -> bool:
    """Whether an edit (difflib opcode, old lines [i1, i2)) falls in the region's lines, or, an
    insertion, next to them."""
    tag, i1, i2 = op[0], op[1], op[2]
    if tag == "equal":
        return False
    if i1 == i2:
        return r.start - 1 <= i1 <= r.end
    return i1 < r.end and i2 > r.start - 1


def _map_line(m: difflib.SequenceMatcher, line: int) -> int:
    """The new line number of old line `line` (1-based; a line upstream removed maps to where it was)."""
    i = line - 1
    for tag, i1, i2, j1, j2 in m.get_opcodes():
        if i1 <= i < i2 or (i1 == i2 == i):
            return j1 + (i - i1 if tag == "equal" else 0) + 1
    ops = m.get_opcodes()
    return (ops[-1][4] if ops else 0) + 1  # past the end of the new text (j2 of the last opcode is len(b))


def _imported_from(tree: ast.Module, name: str) -> str | None:
    for st in ast.walk(tree):
        if isinstance(st, ast.ImportFrom) and any((a.asname or a.name) == name for a in st.names):
            return "." * st.level + (st.module or "")
    return None


def _param_changes(old: tuple[str, ...] | None, new: tuple[str, ...] | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if old is None or new is None:
        return (), ()
    return tuple(p for p in new if p not in old), tuple(p for p in old if p not in new)


def _counts(a: list[bytes], b: list[bytes]) -> tuple[int, int]:
    added = removed = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            removed += i2 - i1
            added += j2 - j1
    return added, removed


def _diff(a: list[bytes], b: list[bytes], old_path: str, new_path: str, a_start: int, b_start: int) -> str:
    """Upstream's change of a region as a unified diff with the files' own line numbers."""
    au = [x.decode("utf-8", "replace").rstrip("\r\n") for x in a]
    bu = [x.decode("utf-8", "replace").rstrip("\r\n") for x in b]
    out: list[str] = [f"--- a/{old_path}", f"+++ b/{new_path}"]
    for group in difflib.SequenceMatcher(None, au, bu, autojunk=False).get_grouped_opcodes(3):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{a_start + i1},{i2 - i1} +{b_start + j1},{j2 - j1} @@")
        for tag, x1, x2, y1, y2 in group:
            if tag == "equal":
                out += [" " + ln for ln in au[x1:x2]]
            else:
                out += ["-" + ln for ln in au[x1:x2]] + ["+" + ln for ln in bu[y1:y2]]
    if len(out) > DIFF_CAP:
        out = out[:DIFF_CAP] + [f"... ({len(out) - DIFF_CAP} more lines)"]
    return "\n".join(out) + "\n" if len(out) > 2 else ""
