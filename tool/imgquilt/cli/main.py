"""The `imgquilt` console script: global options, command registration, errors to exit codes."""
from __future__ import annotations

import sys
import traceback
from typing import Optional

import typer

try:  # typer >= 0.22 vendors click under typer._click
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover
    from click import exceptions as click_exc

from .. import __version__
from ..errors import ImgquiltError
from . import apply as apply_cmds
from . import audit as audit_cmds
from . import rebase as rebase_cmds
from . import work as work_cmds
from .context import G, err, hoist_globals

app = typer.Typer(
    name="imgquilt",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help=(
        "A quilt-style patch queue for container images.\n\n"
        "Global options --queue DIR, --json and --debug may stand before or after the command.\n\n"
        "Examples:\n\n"
        "  imgquilt check\n\n"
        "  imgquilt lock --image oci:examples/demo-image:latest\n\n"
        "  imgquilt apply --layer fix.tar.gz --output-image oci:/tmp/out:fixed\n\n"
        "  imgquilt audit --root /proc/1234/root\n\n"
        "  imgquilt rebase --image oci:new-image:2.0"
    ),
)


def _version(value: bool) -> None:
    if value:
        print(f"imgquilt {__version__}")
        raise typer.Exit(0)


@app.callback()
def _globals(
    queue: Optional[str] = typer.Option(None, "--queue", help="The queue directory (else IMGQUILT_QUEUE, else the nearest with a series file)."),
    json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    debug: bool = typer.Option(False, "--debug", help="Tracebacks for internal errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    # hoist_globals already took these out of argv; accepting them here keeps --help honest
    G.queue = queue or G.queue
    G.json = json or G.json
    G.debug = debug or G.debug


for module in (apply_cmds, audit_cmds, rebase_cmds, work_cmds):
    module.register(app)


def main(argv: list[str] | None = None) -> int:
    from ..util.fastparams import install

    install()  # plain options without pydantic: start-up time
    args = hoist_globals(list(sys.argv[1:] if argv is None else argv))
    try:
        rv = app(args=args, prog_name="imgquilt", standalone_mode=False)
        return rv if isinstance(rv, int) else 0  # a raised Exit comes back as its code
    except ImgquiltError as exc:
        err.print("[bold red]imgquilt:[/] ", end="")
        err.print(exc.render(), markup=False, highlight=False)  # paths may hold `[`
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except click_exc.ClickException as exc:  # usage errors: exit 2
        exc.show()
        return exc.exit_code
    except typer.Abort:
        err.print("Aborted.")
        return 130
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: exit 1, traceback only with --debug
        if G.debug:
            traceback.print_exc()
        else:
            err.print(f"imgquilt: internal error: {exc.__class__.__name__}: {exc}. This is a bug; run with --debug for the traceback.", markup=False)
        return 1


def run() -> None:
    sys.exit(main())
