"""The Python checks, in one package behind one facade.

What it holds (docs/decisions.md, "pycheck/: the Python checks"):
- names.py: the syntax and name check of one file's bytes (compile() and pyflakes), new errors only;
- ruffscreen.py: ruff, in a process of its own, saying which files pyflakes need not read;
- rows.py: the findings of the name check (and the cross-module check's answers) in the shared cache;
- crosscheck.py, pyiface.py, pysearch.py, pyscreen.py: the cross-module check (the imports and calls
  of patched modules against the image's modules, found as CPython would find them);
- workers.py: the pure steps of those checks (parsing, a module's names, a file's items) in forked
  worker processes, when a run has enough source;
- bytecode.py: what CPython would run of the bytecode beside a source (audit's verdicts);
- regions.py: the regions (functions, classes, sections) a patch touches, and what upstream changed
  in them (rebase's report).

The facade:
- `checks(python_check=True)` -> `Checks` | None: the check the engine's gate is given (engine.plan
  takes it as its `python` parameter and imports nothing of this package), with the ruff screen and
  the cache rows when they are there;
- `check(files, image_view, ...)` -> findings: the cross-module check of patched files;
- `judge_bytecode(items)` -> verdicts; `new_errors(base, result, filename)` -> the name check's new
  errors of one file.

Importing this package loads none of the checkers: each is loaded on first use (start-up of `check`
and `--version` stays what it was).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:
    from ..fs.content import Data
    from ..fs.types import Source
    from .bytecode import Seen, Verdict
    from .crosscheck import FileFindings
    from .names import Memo, PendingErrors, Screen
    from .pysearch import ModuleFiles, SourceModules


class Checks:
    """The Python check of a series, as the engine's gate asks it (engine.plan.PythonChecks): the
    syntax and name check of file contents, and the cross-module check against the image's modules.
    `memo`: where findings are kept between runs (rows.PyCheckResults); `screen`: the ruff screen."""

    def __init__(self, memo: Memo | None = None, screen: Screen | None = None) -> None:
        self.memo, self.screen = memo, screen

    # --- the syntax and name check -----------------------------------------------------------------
    def key(self, data: Data, path: str) -> str:
        from .names import check_key

        return check_key(data, path)

    def start(self, files: Iterable[tuple[Data | None, str]]) -> PendingErrors:
        """The findings of each (content, filename), begun: `result()` (by key) waits, `close()` gives up."""
        from .names import start_errors_of_many

        return start_errors_of_many(files, self.memo, self.screen)

    def errors(self, files: Iterable[tuple[Data | None, str]]) -> dict[str, set[str]]:
        from .names import errors_of_many

        return errors_of_many(files, self.memo)

    def located(self, data: Data, path: str, errors: Iterable[str]) -> list[str]:
        from .names import located

        return located(data, path, errors)

    # --- the cross-module check --------------------------------------------------------------------
    def modules(self, source: Source) -> SourceModules:
        """The image's modules as the check reads them (opened before the targets are read, so the
        layers read for them keep their packages' modules)."""
        from .pysearch import SourceModules

        return SourceModules(source)

    def check(self, files: Sequence[tuple[str, str, Any, Any]], image_view: ModuleFiles, base_view: ModuleFiles, *,
              changed: Sequence[tuple[str, Any, Any]], lines: dict[str, list[bytes]] | None = None) -> list[FileFindings]:
        return check(files, image_view, base_view, changed=changed, lines=lines, memo=self.memo)

    def culprit(self, steps: Sequence[tuple[str, Data | None]], resolved: str, finding: Any, place: Any,
                patched_by: dict[str, str]) -> str:
        """The patch that brought `finding` (see crosscheck.culprit)."""
        from .crosscheck import culprit

        return culprit(steps, resolved, finding, place, patched_by)


def checks(python_check: bool = True) -> Checks | None:
    """The check verbs give the engine: None with --no-python-check; else with the ruff screen (None
    without ruff) and the shared cache's findings for that checker (none when the cache is off)."""
    if not python_check:
        return None
    from ..cache.layers import cache_disabled
    from .names import checker_version
    from .rows import PyCheckResults
    from .ruffscreen import ruff_screen

    screen = ruff_screen()
    return Checks(None if cache_disabled() else PyCheckResults(checker_version(screen)), screen)


def check(files: Sequence[tuple[str, str, Any, Any]], image_view: ModuleFiles, base_view: ModuleFiles | None = None, *,
          changed: Sequence[tuple[str, Any, Any]] | None = None, lines: dict[str, list[bytes]] | None = None,
          memo: Memo | None = None) -> list[FileFindings]:
    """The cross-module check of patched .py files: `files`, each (path as named, resolved path, base
    bytes or None, final bytes), against `image_view` (the image with every patched file's final
    bytes, a pysearch.ModuleFiles); new findings only, those the base did not have against
    `base_view` (the image as it is; default `image_view`). `changed`: (resolved, before, after) of
    every file the patches change, .py or not (default: `files`'); `lines`: resolved -> the lines
    its patches add and remove, so only files whose changes may matter are parsed. Returns one
    crosscheck.FileFindings per file checked (its `findings` and "cannot tell" `notes`)."""
    from ..util.gcpause import collector_paused
    from .crosscheck import FileCheck, cross_check

    fcs = [FileCheck(path, resolved, base, final) for path, resolved, base, final in files]
    if changed is None:
        changed = [(fc.resolved, fc.base, fc.final) for fc in fcs]
    with collector_paused():  # the check holds every tree it parses: collections would walk them all, again and again
        return cross_check(fcs, list(changed), image_view, base_view if base_view is not None else image_view, lines, memo)


def judge_bytecode(items: Sequence[Seen]) -> list[Verdict]:
    """What CPython would do with each bytecode file beside its source (bytecode.judge)."""
    from .bytecode import judge

    return judge(items)


def new_errors(base: bytes | None, result: bytes, filename: str) -> list[str]:
    """The syntax and name errors of `result` that `base` had not (every one, for a new file)."""
    from .names import new_python_errors

    return new_python_errors(base, result, filename)
