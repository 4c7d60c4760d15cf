"""The `imgquilt` console script: global options, command registration, errors to exit codes."""
from __future__ import annotations

import os
import sys
import traceback
from typing import Optional

import typer

from .. import __version__
from ..errors import ImgquiltError, UsageError
from . import apply, audit, authoring, cache, files, importing, patch_meta, rebase, setup, stack
from .common import Command, G, emit_json, error_doc, hoist_globals, note

app = typer.Typer(
    name="imgquilt",
    add_completion=False,  # `imgquilt completion SHELL` instead of --install-completion
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    help=(
        "A quilt-style patch queue for container images.\n\n"
        "Global options --queue DIR, --json and --debug may stand before or after the command.\n\n"
        "\b\nExamples:\n"
        "  imgquilt init\n"
        "  imgquilt check\n"
        "  imgquilt lock --image oci:examples/demo-image:latest\n"
        "  imgquilt apply --layer fix.tar.gz --output-image oci:/tmp/out:fixed\n"
        "  imgquilt audit --root /proc/1234/root\n"
        "  imgquilt rebase --image oci:new-image:2.0"
    ),
)


def _version(value: bool) -> None:
    if value:
        print(f"imgquilt {__version__}")
        raise typer.Exit(0)


@app.callback()
def _globals(
    queue: Optional[str] = typer.Option(None, "--queue", metavar="DIR", help="The queue directory (else IMGQUILT_QUEUE, else the nearest with a series file)."),
    json: bool = typer.Option(False, "--json", help="One JSON document on stdout (an {\"error\": ...} document on failure)."),
    debug: bool = typer.Option(False, "--debug", help="Tracebacks for internal errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    # hoist_globals already took these out of argv; accepting them here keeps --help honest
    G.queue = queue or G.queue
    G.json = json or G.json
    G.debug = debug or G.debug


for module in (setup, authoring, files, stack, patch_meta, importing, apply, audit, rebase):
    for name, fn in module.COMMANDS.items():
        app.command(name, cls=Command)(fn)
cache.register(app)


def _fail(exc: ImgquiltError) -> int:
    """A user-facing error: a JSON document on stdout with --json, one paragraph on stderr always."""
    if G.json:
        emit_json(error_doc(exc))
    note(f"imgquilt: {exc.render()}")
    return exc.exit_code


def main(argv: list[str] | None = None) -> int:
    from .fastparams import install

    install()  # plain options without pydantic: start-up time
    if setup.COMPLETE_VAR in os.environ:  # the shell asks for completions
        from typer.completion import completion_init

        completion_init()
        return app(prog_name="imgquilt", complete_var=setup.COMPLETE_VAR)
    args = hoist_globals(list(sys.argv[1:] if argv is None else argv))
    try:
        rv = app(args=args, prog_name="imgquilt", standalone_mode=False)
        return rv if isinstance(rv, int) else 0  # a raised Exit comes back as its code
    except ImgquiltError as exc:
        return _fail(exc)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.TyperException as exc:  # usage errors (click's, vendored by typer): exit 2
        if G.json:
            return _fail(UsageError(exc.format_message()))
        exc.show()  # type: ignore[attr-defined]
        return exc.exit_code
    except typer.Abort:
        note("Aborted.")
        return 130
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: exit 1, traceback only with --debug
        if G.json:
            emit_json({"error": {"code": 1, "kind": "internal-error", "message": f"{exc.__class__.__name__}: {exc}",
                                 "hint": "This is a bug; run with --debug for the traceback."}})
        if G.debug:
            traceback.print_exc()
        else:
            note(f"imgquilt: internal error: {exc.__class__.__name__}: {exc}. This is a bug; run with --debug for the traceback.")
        return 1


def run() -> None:
    sys.exit(main())
