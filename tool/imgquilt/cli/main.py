"""The `imgquilt` console script: the quick commands without typer (quick.py), every other through the
typer app (app.py); errors to exit codes."""
from __future__ import annotations

import errno
import os
import sys
from typing import Any, Callable

from ..errors import ImgquiltError, UsageError, os_error
from .common import G, emit_json, error_doc, hoist_globals, note

COMPLETE_VAR = "_IMGQUILT_COMPLETE"  # settings.COMPLETE_VAR, spelled here so completion loads no command module first


def __getattr__(name: str) -> Any:
    """`app` (every command registered) and `COMMAND_MODULES` live in app.py, loaded on use."""
    if name == "app":
        from .app import whole

        return whole()
    if name == "COMMAND_MODULES":
        from .app import COMMAND_MODULES

        return COMMAND_MODULES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _fail(exc: ImgquiltError) -> int:
    """A user-facing error: a JSON document on stdout with --json, one paragraph on stderr always."""
    if G.json:
        emit_json(error_doc(exc))
    note(f"imgquilt: {exc.render()}")
    return exc.exit_code


class _ReaderGone:
    """stdout (or its .buffer) that, once the reader closed the pipe (`imgquilt audit | head -1`), sends
    the rest to /dev/null: the command runs to its end and exits with its own code, as `git log | head`
    does, instead of dying half-way with exit 1. Every other attribute is the stream's own."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, data: Any) -> int:
        try:
            return self._stream.write(data)
        except BrokenPipeError:
            _to_devnull()
            return len(data)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            _to_devnull()

    @property
    def buffer(self) -> Any:
        return _ReaderGone(self._stream.buffer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _to_devnull() -> None:
    """The reader is gone: what is still buffered, and everything after it, goes nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    if COMPLETE_VAR in os.environ:  # the shell asks for completions
        from .app import complete

        return complete(COMPLETE_VAR)
    stdout = sys.stdout
    sys.stdout = _ReaderGone(stdout)  # type: ignore[assignment]
    try:
        args = hoist_globals(list(sys.argv[1:] if argv is None else argv))
        from .quick import quick

        call = quick(args)  # top, series, --version...: plain argv, no typer (start-up time)
        if args == ["--version"]:
            return _guarded(call)  # reads no setting: loads no module but the CLI's
        return _guarded(_with_settings(call if call is not None else _with_typer(args)))
    finally:
        sys.stdout.flush()  # into the pipe, or /dev/null once its reader is gone: never an error at exit
        sys.stdout = stdout


# errors of a path, never of imgquilt's logic: what the user gave or keeps, reported with exit 6
_PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ELOOP, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR,
                          errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EMLINK, errno.ETXTBSY})


def _with_settings(call: Callable[[], Any]) -> Callable[[], Any]:
    """`call` with the command's settings (the environment and the global flags) in force."""

    def run() -> Any:
        from ..settings import use

        with use(G.settings()):
            return call()

    return run


def _with_typer(args: list[str]) -> Callable[[], Any]:
    from .app import run_app

    return lambda: run_app(args)


def _guarded(call: Callable[[], Any]) -> int:
    """Run one command; a user-facing error becomes its exit code, a bug exit 1."""
    try:
        rv = call()
        return rv if isinstance(rv, int) else 0  # a raised Exit comes back as its code
    except ImgquiltError as exc:
        return _fail(exc)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # a write that bypassed sys.stdout: the reader stopped early, not a failure
        _to_devnull()
        return 0
    except OSError as exc:
        if exc.errno not in _PATH_ERRNOS:
            return _bug(exc)
        # a path the system refuses (a name too long, a loop of links, no permission, a full or
        # read-only disk) wherever it came from: the user's input or environment, not a bug (exit 6)
        if G.debug:
            import traceback

            traceback.print_exc()
        return _fail(os_error(exc, repr(str(exc.filename)) if exc.filename else "a path"))
    except Exception as exc:  # typer's own exits and usage errors (when typer ran), else a bug
        typer = sys.modules.get("typer")
        if typer is not None and isinstance(exc, typer.Exit):
            return exc.exit_code
        if typer is not None and isinstance(exc, typer.TyperException):  # click's usage errors, vendored by typer: exit 2
            if G.json:
                return _fail(UsageError(exc.format_message()))
            exc.show()  # type: ignore[attr-defined]
            return exc.exit_code
        if typer is not None and isinstance(exc, typer.Abort):
            note("Aborted.")
            return 130
        return _bug(exc)


def _bug(exc: BaseException) -> int:
    """Exit 1: an error imgquilt has no words for is a bug."""
    if G.json:
        from .documents import bug_doc

        emit_json(bug_doc(exc))
    if G.debug:
        import traceback

        traceback.print_exc()
    else:
        note(f"imgquilt: internal error: {exc.__class__.__name__}: {exc}. This is a bug; run with --debug for the traceback.")
    return 1


def run() -> None:
    sys.exit(main())
