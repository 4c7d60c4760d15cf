"""How a string imgquilt did not write is shown: a patch or guard name from a cloned queue, a profile's
`select` or env value from targets.lock, a path or link target from an image, a registry's own words.

One rule, for every output: a character that is not printable (ESC, a newline, a carriage return, a
bidi override, a byte that is not UTF-8) is written as its Python escape (`\\x1b`, `\\n`, `\\u202e`,
`\\udcff`), so no input can colour, move or clear the terminal, or start a line of its own. Printable
text is left as it is, so `shown(shown(s)) == shown(s)`. The output functions of the CLI (its plain
lines, tables, error paragraphs and progress lines) pass everything they print through `shown_lines`,
which keeps only the line breaks and tabs imgquilt writes itself; a value that may hold a newline (an
env value of a hand-edited lock) is passed through `shown` where it is put in a line.
"""
from __future__ import annotations


def shown(text: str, *, keep: str = "") -> str:
    """`text` with every character that is not printable, apart from those in `keep`, as its escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else c.encode("unicode_escape").decode("ascii") for c in text)


def shown_lines(text: str) -> str:
    """Text imgquilt prints (lines it wrote, values in them): `shown`, keeping its newlines and tabs."""
    return shown(text, keep="\n\t")


def control_character(text: str) -> str | None:
    """The first character of `text` that `shown` would escape (None: it prints as it is)."""
    return next((c for c in text if not c.isprintable()), None)


def shown_env(key: str, value: str | None) -> str:
    """`KEY=VALUE` of an env default or an image's Env (`no KEY` when unset), escaped as one word."""
    return shown(f"no {key}" if value is None else f"{key}={value}")
