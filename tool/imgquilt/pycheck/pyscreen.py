"""Which patched files the cross-module check must parse at all, from the lines their patches change.

Parsing is most of the check's cost, and a large queue changes hundreds of files. A file's new items
(crosscheck.py) can only come from what its patches changed, so a file is parsed only when one of
the lines they add or remove (the hunks' `+` and `-` lines):
- names a name that one of the file's import statements names (a use, or a new binding of it),
- holds `import`, `try`, `except`, `TYPE_CHECKING` (what guards an import), a triple quote (a
  string that starts or ends there turns code into text or back) or a backslash,
- may be part of a longer statement: brackets that do not balance on the line, or a line that
  starts with a closing bracket, a dot or an operator, or ends with a comma, an opening bracket
  or an operator (the call it belongs to may have changed shape).
A patched module is parsed (before and after) to see whether what it offers its importers changed
only when one of its changed lines is a top-level statement, or holds `def`, `class`, a decorator,
an annotation (a dataclass field), or one of the words that change a module's names (`__all__`,
`__getattr__`, `global`, `:=`, ...); then every file that names one of the names whose binding
changed is parsed too, "names" meaning it may have an import or call naming it (names_used: a
module's own new name, only bound at a line's start, is not named by it). Decided here and
documented in docs/boot-checks.md: a plain assignment inside a top-level `if` or `try` block,
changed on its own, is not taken as a change of the module's names.
"""
from __future__ import annotations

import keyword
import re
from typing import Iterable, Iterator

_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_IMPORT_LINE = re.compile(rb"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+)?import[ \t]+([^\r\n#]*)", re.M)
_ITEM_WORDS = (b"import", b"try", b"except", b"TYPE_CHECKING", b'"""', b"'''", b"\\")
_STRINGS = re.compile(rb"""(?:[rRbBuUfF]{0,2})(?:"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')""")
_STARTS_MID = re.compile(rb"^(?:[-+*/%&|^<>=@)\]}.]|(?:and|or|in|is)\b)")  # a continued statement
_STARTS_CLAUSE = re.compile(rb"^(?:if|else|for|async for)\b")  # a statement, or a comprehension's continued clause
_ENDS_OPEN = re.compile(rb"(?:[-+*/%&|^<>=@,(\[{\\]|\b(?:and|or|not|in|is|if|else|lambda))$")
_IFACE_WORDS = (b"def ", b"class ", b"import", b"__all__", b"__getattr__", b"__path__", b"global", b":=", b"globals", b"exec",
                b"setattr", b"sys.modules", b"__init__", b"__new__", b"KW_ONLY", b"field(", b"ClassVar", b"metaclass", b'"""', b"'''")
_ANNOTATION = re.compile(rb"^[ \t]+[A-Za-z_]\w*[ \t]*:(?!=)")


def may_add_items(changed: Iterable[bytes], sources: tuple[bytes | None, ...]) -> bool:
    """Whether the changed lines may give the file an import or call it did not have (see above).
    `sources`: the file's versions, whose import statements say which names are imported (looked at
    only where a changed line's words occur: imports_any)."""
    words: set[bytes] = set()
    for raw in changed:
        line = raw.strip()
        if not line or line.startswith(b"#"):
            continue
        if any(w in line for w in _ITEM_WORDS):
            return True
        words.update(_WORD.findall(line))
        code = _STRINGS.sub(b"''", line.split(b"#", 1)[0]).strip()
        if not code:
            continue
        depth = code.count(b"(") + code.count(b"[") + code.count(b"{") - code.count(b")") - code.count(b"]") - code.count(b"}")
        if depth != 0 or _STARTS_MID.match(code) or _ENDS_OPEN.search(code) or (_STARTS_CLAUSE.match(code) and not code.endswith(b":")):
            return True
    return imports_any(sources, words - {b"import", b"from", b"as"})


def imports_any(sources: Iterable[bytes | None], words: set[bytes]) -> bool:
    """Whether an import statement of the sources may name one of `words`: True for every word of an
    import statement's line (up to a comment) or of the brackets it leaves open (up to the first `)`),
    and maybe for a few more. Found where each word occurs, instead of reading every import statement
    of the file (a warm check screens a thousand files)."""
    for src in sources:
        if not src:
            continue
        for w in words:
            # a word as _WORD finds words: a digit may come before it
            if any(_in_import(src, at) for at in _occurrences(src, w, _WORD_START, _WORD_BYTE_ASCII)):
                return True
    return False


def _occurrences(src: bytes, word: bytes, before: frozenset[int], after: frozenset[int]) -> Iterator[int]:
    """Where `word` occurs in `src` as a word: no byte of `before` just before it, none of `after` just after."""
    at = src.find(word)
    while at >= 0:
        end = at + len(word)
        if (at == 0 or src[at - 1] not in before) and (end == len(src) or src[end] not in after):
            yield at
        at = src.find(word, at + 1)


def _in_import(src: bytes, at: int) -> bool:
    """Whether position `at` lies in what imports_any reads of an import statement: its line (up to a
    comment), or the brackets it opens and leaves open, up to the first `)`."""
    m = _IMPORT_LINE.match(src, src.rfind(b"\n", 0, at) + 1)
    if m is not None and at < m.end():
        return True
    # an import line before, whose open bracket no `)` has closed by here: it starts after the last `)`
    # before `at` (neither its line nor its tail holds one)
    i = src.find(b"import", src.rfind(b")", 0, at) + 1, at)
    while i >= 0:
        m = _IMPORT_LINE.match(src, src.rfind(b"\n", 0, i) + 1)
        if m is not None and m.end() <= at and b"(" in m.group(1) and b")" not in m.group(1):
            return True
        i = src.find(b"import", i + 1, at)
    return False


def may_change_interface(changed: Iterable[bytes]) -> bool:
    """Whether the changed lines may change what the module offers its importers (see above)."""
    for raw in changed:
        stripped = raw.strip()
        if not stripped or stripped.startswith(b"#"):
            continue
        if raw[:1] not in (b" ", b"\t"):
            return True  # a top-level statement
        if stripped.startswith(b"@") or any(w in raw for w in _IFACE_WORDS) or _ANNOTATION.match(raw):
            return True
    return False


_SHAPE_WORDS = (b"__all__", b"__getattr__", b"__path__", b"extend_path", b"exec", b"globals", b"vars", b"setattr",
                b"__import__", b"modules")


def may_change_shape(changed: Iterable[bytes]) -> bool:
    """Whether the changed lines may change the shape of what a module offers (its `__all__`, a star
    import, a module `__getattr__`, `__path__`, a write to its namespace): then every patched file
    is checked again (crosscheck.changed_names), and their items are best computed while each is
    parsed for its names. A guess for scheduling work only: a wrong one costs a second parse of a
    file, never a different answer."""
    return any(any(w in line for w in _SHAPE_WORDS) or (b"*" in line and b"import" in line) for line in changed)


_BINDING_END = re.compile(rb"[=(:]")
_KEYWORDS = frozenset(keyword.kwlist)  # never a name (the soft ones, `match`, `type`, can be)


def bound_words(changed: Iterable[bytes]) -> set[str]:
    """The names the changed lines may bind, as a guess: every word of an import line, else the words
    before its first `=`, `(` or `:` (`X = 1`, `def f(`, `class C(`, `a, b =`). Which files will be
    checked again depends on the names the patched modules' changes bind, known only once they are
    parsed: this guess lets the workers parsing them compute the items of the files likely to be
    checked while they hold their trees. A wrong guess costs a second parse, never an answer."""
    out: set[bytes] = set()
    for raw in changed:
        line = raw.strip()
        if b"import" in line:
            out.update(_WORD.findall(line))
            continue
        m = _BINDING_END.search(line)
        out.update(_WORD.findall(line[: m.start()] if m else line))
    return {w.decode() for w in out} - _KEYWORDS


def words_of(source: bytes) -> set[str]:
    """Every word of the source (a name it may use)."""
    return {w.decode() for w in set(_WORD.findall(source))}  # ASCII words: decode() cannot fail


# what may stand before and after a name that an occurrence only binds: `N = ...`, `N: T`, `def N`, `class N`
_BINDS_BEFORE = re.compile(rb"[ \t]*(?:(?:async[ \t]+)?def[ \t]+|class[ \t]+)?")
_BINDS_AFTER = re.compile(rb"[ \t]*(?:=(?!=)|:)")
_DEF_OR_CLASS = re.compile(rb"[ \t]*(?:(?:async[ \t]+)?def|class)[ \t]+")
_WORD_START = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_WORD_BYTE_ASCII = _WORD_START | frozenset(b"0123456789")
_WORD_BYTE = _WORD_BYTE_ASCII | frozenset(range(0x80, 0x100))


def names_used(source: bytes, wanted: Iterable[str], path: str) -> set[str]:
    """The names of `wanted` that the file at `path` may have an item naming (crosscheck.items_of:
    an item names a word of an import statement, a word after a dot, or a package of the file's own
    path through a relative import). A name the source has is left out only when each of its
    occurrences binds it at the start of a line (`N = ...`, `N: T`, `def N`, `class N`: a patched
    module's own new names are nearly always only that), no dot comes before it (across spaces, line
    breaks, backslashes and comments) and no part of the path is it."""
    parts = {x.rsplit(".", 1)[0] for x in path.split("/")} | set(path.split("/"))
    dotted: set[bytes] | None = None  # every word after a dot: found once, when a name needs it
    out: set[str] = set()
    for name in wanted:
        word = name.encode()
        if not word or source.find(word) < 0:
            continue
        if name in parts or not _only_binds(source, word):
            out.add(name)
            continue
        if dotted is None:
            dotted = set(_DOTTED.findall(source))
        if word in dotted:
            out.add(name)
    return out


# a dot, then spaces, line breaks, backslashes and comments, then a word: an attribute's name
_DOTTED = re.compile(rb"\.(?:[\s\\]|#[^\r\n]*)*([A-Za-z_\x80-\xff][A-Za-z0-9_\x80-\xff]*)")


def _only_binds(source: bytes, word: bytes) -> bool:
    """Whether each occurrence of `word` as a whole identifier binds it at a line's start."""
    for at in _occurrences(source, word, _WORD_BYTE, _WORD_BYTE):
        start = source.rfind(b"\n", 0, at) + 1
        before = _BINDS_BEFORE.match(source, start, at)
        if before is None or before.end() != at:
            return False  # something else before it on its line
        if not _DEF_OR_CLASS.fullmatch(source, start, at) and not _BINDS_AFTER.match(source, at + len(word)):
            return False  # a name alone at a line's start, then no `=` or `:`
    return True


def names_in(source: bytes, wanted: set[str]) -> bool:
    """Whether the source names one of `wanted` as a word."""
    if not wanted:
        return False
    return any(w.decode() in wanted for w in set(_WORD.findall(source)))
