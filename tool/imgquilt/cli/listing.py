"""The read-only commands: top, applied, unapplied, next, previous, series, header, check. Without typer:
cli/quick.py runs them straight from argv (start-up time); stack.py, patch_meta.py and apply.py register them with typer."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UsageError
from .annotations import Format, annotate, problem_file
from . import documents
from .common import G, emit_json, emit_outcome, progress, say, tree, write_bytes

if TYPE_CHECKING:
    from ..queue.lock import LockUpdate
    from ..queue.patchfile import Header


def top_cmd() -> None:
    """Print the top applied patch.

    \b
    Example:
      imgquilt top
    """
    wt = tree(guard=False)
    top = wt.top()
    if G.json:
        emit_json(documents.top_doc(top))
        return
    if top is None:
        raise UsageError("No patches applied.")
    say(top)


def _neighbour(key: str, name: str | None, none: str) -> None:
    if G.json:
        emit_json(documents.next_doc(name) if key == "next" else documents.previous_doc(name))
        return
    if name is None:
        raise UsageError(none)
    say(name)


def next_cmd() -> None:
    """Print the next patch to push.

    \b
    Example:
      imgquilt next
    """
    from ..work.unrefreshed import neighbour

    _neighbour("next", neighbour(tree(guard=False), 1), "No next patch: every patch is applied.")


def previous_cmd() -> None:
    """Print the patch below the top one.

    \b
    Example:
      imgquilt previous
    """
    from ..work.unrefreshed import neighbour

    _neighbour("previous", neighbour(tree(guard=False), -1), "No previous patch: fewer than two patches are applied.")


def _names(key: str, names: list[str]) -> None:
    if G.json:
        emit_json(documents.applied_doc(names) if key == "applied" else documents.unapplied_doc(names))
        return
    for n in names:
        say(n)


def applied_cmd() -> None:
    """List the applied patches, bottom first.

    \b
    Example:
      imgquilt applied --json
    """
    _names("applied", tree(guard=False).applied())


def unapplied_cmd() -> None:
    """List the patches not applied yet, next first.

    \b
    Example:
      imgquilt unapplied
    """
    _names("unapplied", tree(guard=False).unapplied())


def series(verbose: bool) -> None:
    """The body of `imgquilt series` (its options and help are in stack.py)."""
    wt = tree(guard=False)
    names, applied = wt.series(), wt.applied()
    chosen = wt.selected()  # every name unless series holds guards
    out = [n for n in names if n not in chosen]
    if G.json:
        emit_json(documents.series_doc(names, applied, out))
        return
    for n in names:
        if not verbose:
            say(n)
            continue
        mark = "=" if applied and n == applied[-1] else ("+" if n in applied else ("G" if n in out else " "))
        say(f"{mark} {n}")


def show_header(name: str | None) -> None:
    """`imgquilt header [PATCH]` without options (the options are in patch_meta.py)."""
    from ..work.header import header as read_header

    name, header = read_header(tree(), name)
    render_header(name, header, False)


def render_header(name: str, header: Header, changed: bool, *, asked: bool = False, lock: LockUpdate | None = None) -> None:
    """The header printed; after --set/--unset/--edit, whether it changed (nothing is written when not)."""
    if G.json:
        emit_json(documents.header_doc(name, header, changed, asked, lock))
        return
    if asked:
        say(f"Header of {name} updated." if changed else f"Header of {name} unchanged.")
        return
    write_bytes(header.raw)


def check(image: str | None, platform: str | None, format: Format, profile: str | None = None,
          allow_unselected: bool = False, strict: bool = False, boot: bool = False) -> None:
    """The body of `imgquilt check` (its options and help are in apply.py)."""
    from ..verbs.check import CheckRequest, check, refuse_check
    from ..work.rehash import stale_results

    req = CheckRequest(G.queue, image, platform, progress(), profile, allow_unselected, strict, boot)
    checked = check(req, stale_results)
    problems, failure = list(checked.problems), checked.error
    booted = None
    if boot and failure is None:  # --boot: the queue is sound; now import its modules on the image (docs/boot.md)
        from ..verbs.boot import BootRequest, boot as boot_queue

        refuse_check(req)
        booted = boot_queue(BootRequest(G.queue, image=image, platform=platform, profile=profile, progress=progress()))
        failure = booted.failure()
        if failure is not None:
            problems += list(failure.problems)
    if G.json:
        emit_outcome(documents.check_doc(checked, failure is None, problems, profile is not None, booted), failure)
        return
    if booted is not None:
        for p in booted.patches:
            say(f"{p.verdict:<12} {p.name}" + (f"  ({p.why})" if p.why else ""))
            for module, f in p.failures:
                say(f"    {module}: {f.render()}")
                if format is Format.github:
                    annotate("error", f.path, f"imgquilt check --boot: {module}", f"{p.name}: {f.type}: {f.message}", line=f.line)
    if format is Format.github and booted is None:
        for p in problems:
            annotate("error", problem_file(p), "imgquilt check", p)
        if failure is not None and not problems:
            annotate("error", None, "imgquilt check", failure.message)
    if failure is not None:
        raise failure
    say(f"The queue is sound: {len(checked.patches)} patch(es), chains and Requires in order.")
    if checked.unchecked:
        say(f"note: never Python-checked (written with --no-python-check; `check --strict` refuses them): "
            f"{', '.join(checked.unchecked)}")
    for name in checked.profiles:
        say(f"Profile {name}: verified on the image it pins.")
