"""What every command module shares: global options, output (plain lines, JSON, rich tables), the
--image/--platform options, opening an image, the work tree, header-field parsing.

Cheap to import: the queue, image and work-tree code load inside the functions that need them, so
`imgquilt --version`, `top`, `series` and `check` never import the image or engine machinery.
"""
from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..errors import ImgquiltError, QueueNotFound, UsageError, shown, shown_lines  # shown: the one rule
from .documents import error_doc  # the failure branch of every document

if TYPE_CHECKING:
    from ..settings import Settings
    from rich.console import Console

    from ..fs.types import Source
    from ..queue.lock import Lock
    from ..queue.queue import Queue
    from ..work import WorkTree


# --- global options ---------------------------------------------------------------------------
@dataclass
class Globals:
    """Options accepted before or after the command name."""

    queue: str | None = None
    json: bool = False
    debug: bool = False
    progress: str | None = None  # never, auto, plain (None: IMGQUILT_PROGRESS, else auto)
    tls_verify: str | None = None  # --tls-verify=BOOL (None: IMGQUILT_TLS_VERIFY)

    def settings(self) -> Settings:
        """The command's settings: the environment with these flags on top."""
        from ..settings import Settings

        return Settings.from_env(queue=self.queue, progress=self.progress, tls_verify=self.tls_verify, json=self.json,
                                 debug=self.debug)


G = Globals()
GLOBAL_FLAGS = {"--json": "json", "--debug": "debug"}


def hoist_globals(argv: list[str]) -> list[str]:
    """Take --queue/--json/--debug/--progress/--quiet (and --tls-verify=BOOL) out of argv wherever they stand (DESIGN: before or after the command)."""
    rest: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            rest.extend(argv[i:])
            break
        if a in GLOBAL_FLAGS:
            setattr(G, GLOBAL_FLAGS[a], True)
        elif a == "--queue" and i + 1 < len(argv):
            G.queue = argv[i + 1]
            i += 1
        elif a.startswith("--queue="):
            G.queue = a.split("=", 1)[1]
        elif a == "--progress" and i + 1 < len(argv):
            G.progress = argv[i + 1]
            i += 1
        elif a.startswith("--progress="):
            G.progress = a.split("=", 1)[1]
        elif a == "--quiet":
            G.progress = "never"
        elif a.startswith("--tls-verify="):  # registries: as skopeo and podman spell it
            G.tls_verify = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    return rest


def __getattr__(name: str) -> Any:
    """The typer parts (the shared options, the Command class) are built on first use: the quick
    commands (cli/quick.py) run without importing typer at all."""
    if name not in ("ImageOpt", "PlatformOpt", "VerboseOpt", "ProfileOpt", "Command"):  # e.g. the import system's __path__
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import typer
    import typer.core

    class Command(typer.core.TyperCommand):
        """Help without typer's `<str>` label after each argument name: the metavar already says what to
        pass. The label is blanked, not cut, so the help column stays aligned. In shell completion, the
        global options are offered after the command too (hoist_globals takes them from anywhere)."""

        def get_help(self, ctx) -> str:  # type: ignore[no-untyped-def]
            return _TYPE_LABEL.sub(lambda m: m.group(1) + " " * (len(m.group(2)) + 1), super().get_help(ctx))

        def get_params(self, ctx):  # type: ignore[no-untyped-def]
            params = super().get_params(ctx)
            if "_IMGQUILT_COMPLETE" in os.environ and ctx.parent is not None:  # never while parsing a command
                top = ctx.find_root()
                params = params + [p for p in top.command.params if p.name in ("queue", "json", "debug", "tls_verify", "progress", "quiet")]
            return params

    made = {
        "ImageOpt": typer.Option(None, "--image", "-i", metavar="REF", help="Image reference (oci:DIR[:TAG], oci-archive:FILE, docker-archive:FILE, rootfs:DIR, tar:FILE, a path, docker://HOST/REPO[:TAG|@DIGEST] read in the registry (--tls-verify=false for one without valid HTTPS), or any other skopeo transport)."),
        "PlatformOpt": typer.Option(None, "--platform", metavar="OS/ARCH", help="os/arch[/variant] to pick from a multi-platform image; for apply and audit, `all`: every platform of the index."),
        "VerboseOpt": typer.Option(False, "--verbose", "-v", help="One row per patch and file instead of one line per patch."),
        "ProfileOpt": typer.Option(None, "--profile", metavar="NAME|all", help="A profile declared in targets.lock: the patches its guards select, its pinned image and its env defaults; `all`: every profile, each on its own image (docs/profiles.md)."),
        "Command": Command,
    }
    globals().update(made)  # once: every module shares the same option objects, as before
    return made[name]


_TYPE_LABEL = re.compile(r"(?m)^(  [^\s<-][^<\n]*?) (<[^>\s]+>)")


# --- output -----------------------------------------------------------------------------------
# how `audit` and a fleet audit colour each state of a patch
AUDIT_COLOR = {"live": "green", "pending": "cyan", "drifted-live": "yellow", "drifted": "red", "missing": "red",
               "shadowed": "red", "restart-pending": "yellow", "partial": "magenta"}


@cache
def out() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


@cache
def err() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


# A CI runner (GitHub Actions) executes a log line that starts, after blanks, with `::` (a workflow
# command), and one holding `##[` anywhere (the older syntax). Names come from inputs (patch files,
# merged documents, image lists, paths in patches), and a name holding a newline would start such a
# line. So every line imgquilt prints goes through defuse(): a `::` at a line's start gets a backslash
# before it, and `##[` becomes `#\#[`; only annotate() (--format github) writes commands, by raw_say.
_COMMAND_START = re.compile(r"(^|[\n\r])([^\S\n\r]*)(?=::)")  # the runner ends a line at \n, \r or \r\n


def defuse(text: str) -> str:
    """`text` with no line a CI runner would take for a workflow command."""
    if "::" in text:
        text = _COMMAND_START.sub(r"\1\2\\", text)
    return text.replace("##[", "#\\#[") if "##[" in text else text


def say(text: str) -> None:
    """One plain line on stdout (no markup, no wrapping); never a workflow command (defuse), never a
    terminal escape (shown_lines: what a queue, a lock, an image or a registry put in it is escaped)."""
    raw_say(defuse(text))


def raw_say(text: str) -> None:
    """A line as given (annotate()'s workflow commands, escaped by GitHub's rules), control characters
    but its line breaks and tabs escaped (errors.shown)."""
    _bars_off()
    sys.stdout.write(shown_lines(text) + "\n")


def _bars_off() -> None:
    if "imgquilt.cli.progress" in sys.modules:
        sys.modules["imgquilt.cli.progress"].stop()


def note(text: str) -> None:
    """One plain line on stderr; never a workflow command (defuse), never a terminal escape (shown_lines)."""
    _bars_off()
    sys.stdout.flush()
    sys.stderr.write(defuse(shown_lines(text)) + "\n")


def write_bytes(data: bytes) -> None:
    """Patch text byte for byte (CRLF and non-UTF-8 survive)."""
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def say_lock(update: Any) -> None:
    """What a command that changed the queue did about targets.lock (work.relock.LockUpdate), one line."""
    line = update.line() if update is not None else None
    if line:
        say(line)


def emit_json(doc: Any) -> None:
    """The document, indented; `##[` inside a string is written `#\\u0023[` (the same JSON value, but
    no runner command: see defuse). A line of it never starts with `::` (strings are quoted)."""
    text = json.dumps(doc, indent=2, sort_keys=False)
    sys.stdout.write((text.replace("##[", "#\\u0023[") if "##[" in text else text) + "\n")


def on_terminal() -> bool:
    return sys.stdout.isatty()


def table(title: str | None, columns: list[str], rows: list[list[str | tuple[str, str]]]) -> None:
    """A table: drawn by rich on a terminal; in a pipe or CI log, one plain tab-separated row per line
    (a header row first), never wrapped or truncated, so names stay whole and grep/cut work."""
    _bars_off()
    if not on_terminal():
        if title:
            say(title)
        for row in [columns, *rows]:
            say("\t".join(shown(c if isinstance(c, str) else c[0]) for c in row))
        return
    from rich.table import Table
    from rich.text import Text

    t = Table(title=Text(shown(title)) if title else None, title_justify="left")
    for c in columns:
        t.add_column(c, overflow="fold")
    for row in rows:
        t.add_row(*(Text(shown(c)) if isinstance(c, str) else Text(shown(c[0]), style=c[1]) for c in row))
    out().print(t)


def emit_outcome(doc: dict[str, Any], failure: ImgquiltError | None) -> None:
    """--json of a command that reports what it found: its document, plus "error" when it failed
    (then the paragraph on stderr, as for every failure, and exit with that error's code)."""
    emit_json({**doc, "error": error_doc(failure)["error"]} if failure is not None else doc)
    if failure is not None:
        note(f"imgquilt: {failure.render()}")
        import typer

        raise typer.Exit(failure.exit_code)


# --- the queue --------------------------------------------------------------------------------
def queue_root() -> Path:
    from ..queue.locate import find_queue

    return find_queue(G.queue)


def load() -> Queue:
    from ..queue.queue import load_queue

    return load_queue(queue_root())


def refuse_during_rebase(root: Path) -> None:
    from ..verbs.rebase_guard import refuse_during_rebase as refuse

    refuse(root)


# --- images -----------------------------------------------------------------------------------
def progress(label: str = "") -> Any:
    """Progress of layer reads and registry downloads on stderr (cli/progress.py: bars on a terminal,
    plain lines off one, as --progress says); None when nothing is to be shown."""
    from . import progress as bars

    style = bars.mode(None, G.json)  # None: the settings' (--progress, --quiet, else IMGQUILT_PROGRESS)
    if style == "none":
        return None
    return bars.LayerProgress(style, label)  # its download() is the registry downloads' progress


def open_ref(ref: str, platform: str | None) -> Source:
    from ..verbs.refs import open_ref as verbs_open

    try:
        root: Path | None = queue_root()
    except ImgquiltError:
        root = None
    return verbs_open(ref, platform, root=root, progress=ref_progress(ref))


def ref_progress(ref: str) -> Any:
    """The progress of reading `ref`, labelled with it (shortened)."""
    return progress(_short(ref))


def _short(ref: str) -> str:
    return ref if len(ref) <= 32 else "…" + ref[-31:]


def cache_dir() -> Path | None:
    """The current queue's own cache directory (None outside a queue)."""
    from ..verbs.refs import cache_dir as queue_cache

    try:
        return queue_cache(queue_root())
    except ImgquiltError:
        return None


def pick_ref(image: str | None, lock: Lock | None, remembered: str | None = None) -> str:
    """--image, else the image targets.lock pins, else `remembered` (see api.pick_ref)."""
    from ..verbs.refs import pick_ref as pick

    return pick(image, lock, queue_root(), remembered)


def absolute_ref(ref: str) -> str:
    """A ref that still works from another directory: relative paths made absolute."""
    for prefix in ("rootfs:", "oci:", "oci-archive:", "docker-archive:", "tar:", ""):
        if ref.startswith(prefix) and Path(ref[len(prefix):]).exists():
            return prefix + str(Path(ref[len(prefix):]).resolve())
    return ref


def one_patch(positional: str | None, option: str | None, *, what: str = "PATCH") -> str | None:
    """A patch named as the argument or with -P (an alias: every command takes both); both must agree."""
    if positional is not None and option is not None and positional != option:
        raise UsageError(f"Two patches named: {positional!r} and -P {option!r}.", hint=f"Name the {what} once (`-P` is the same argument).")
    return positional if positional is not None else option


def patch_names(which: str) -> Callable[[str], list[str]]:
    """Shell completion of a PATCH argument: the names in series ("series"), the applied ones, or the
    unapplied ones, that start with what was typed (none outside a queue)."""

    def complete(incomplete: str) -> list[str]:
        from ..work.queuefiles import QueueFiles
        from ..work.state import WorkState

        try:
            root = queue_root()
            names = QueueFiles(root).names()
            applied = WorkState(root).applied() if which != "series" else []
        except (ImgquiltError, OSError):
            return []
        pick = {"series": names, "applied": applied, "unapplied": [n for n in names if n not in applied]}[which]
        return [n for n in pick if n.startswith(incomplete)]

    return complete


# --- the work tree ----------------------------------------------------------------------------
def tree(image: str | None = None, platform: str | None = None, *, guard: bool = True) -> WorkTree:
    """The work tree of the current queue (a queue must exist: `imgquilt init` makes one).

    `guard`: refuse while a rebase is stopped (every command that changes the queue or work tree).
    """
    from ..work import WorkTree

    try:
        root = queue_root()
    except QueueNotFound as exc:
        raise QueueNotFound(exc.message, hint="Create one here with `imgquilt init` (or pass --queue DIR).") from None
    if guard:
        refuse_during_rebase(root)
    wt: WorkTree

    def opener() -> Source:
        lock = wt.bases.lock() if image is None else None  # the pin of the profile the work tree follows
        source = open_ref(pick_ref(image, lock, wt.remembered_image()), platform)
        if image is not None:
            wt.remember_image(absolute_ref(image))
        return source

    wt = WorkTree(root, open_image=opener, image_explicit=image is not None)
    return wt


def editor() -> str | None:
    """IMGQUILT_EDITOR always (scripts, tests); VISUAL/EDITOR only on a terminal."""
    from ..settings import current

    if current().editor:
        return current().editor
    if sys.stdin.isatty() and sys.stdout.isatty():
        return os.environ.get("VISUAL") or os.environ.get("EDITOR")
    return None


def run_editor(cmd: str, files: list[Path]) -> None:
    # as git runs $EDITOR: through the shell, so "code --wait" works
    import subprocess

    r = subprocess.run(["sh", "-c", f'{cmd} "$@"', cmd, *[str(f) for f in files]])
    if r.returncode != 0:
        raise UsageError(f"The editor ({cmd}) exited with status {r.returncode}; nothing more was changed.")


# --- patch headers ----------------------------------------------------------------------------
def field_pairs(sets: list[str], unsets: list[str] | None = None, option: str = "--set") -> list[tuple[str, str | None]]:
    from ..work.header import check_field_name

    pairs: list[tuple[str, str | None]] = []
    for item in sets:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"{option} wants FIELD=VALUE, not {item!r}.")
        pairs.append((check_field_name(key.strip()), value))
    pairs += [(check_field_name(k.strip()), None) for k in unsets or []]
    return pairs


def header_fields(description: str | None, author: str | None, requires: list[str], status: str | None, fields: list[str]) -> list[tuple[str, str | None]]:
    pairs: list[tuple[str, str | None]] = []
    if description is not None:
        pairs.append(("Description", description))
    if author is not None:
        pairs.append(("Author", author))
    if requires:
        pairs.append(("Requires", " ".join(requires)))
    if status is not None:
        pairs.append(("Status", status))
    return pairs + field_pairs(fields, option="--field")
