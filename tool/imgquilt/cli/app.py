"""The typer app: global options, the lazily loaded command table. Loaded by main.py for every command
but the quick ones (cli/quick.py)."""
from __future__ import annotations

from importlib import import_module
from typing import Any, Optional

import typer

from .. import __version__
from .common import Command, G

_app = typer.Typer(
    name="imgquilt",
    add_completion=False,  # `imgquilt completion SHELL` instead of --install-completion
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    help=(
        "A quilt-style patch queue for container images.\n\n"
        "Global options --queue DIR, --json, --debug, --tls-verify=BOOL, --progress=never|auto|plain and --quiet may stand "
        "before or after the command.\n\n"
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


@_app.callback()
def _globals(
    queue: Optional[str] = typer.Option(None, "--queue", metavar="DIR", help="The queue directory (else IMGQUILT_QUEUE, else the nearest with a series file)."),
    json: bool = typer.Option(False, "--json", help="One JSON document on stdout (an {\"error\": ...} document on failure)."),
    debug: bool = typer.Option(False, "--debug", help="Tracebacks for internal errors."),
    tls_verify: Optional[str] = typer.Option(None, "--tls-verify", metavar="BOOL", help="Registries (docker://): false reaches one over HTTP or without a valid certificate, as skopeo's --tls-verify=false (or IMGQUILT_TLS_VERIFY=false)."),
    progress: Optional[str] = typer.Option(None, "--progress", metavar="MODE", help="Progress of image reads on stderr: auto (the default; IMGQUILT_PROGRESS sets another): bars on a terminal, plain lines off one; plain: plain lines always; never."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress (--progress=never)."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    # hoist_globals already took these out of argv; accepting them here keeps --help honest
    G.queue = queue or G.queue
    G.json = json or G.json
    G.debug = debug or G.debug
    G.progress = "never" if quiet else (progress or G.progress)
    if tls_verify is not None:  # hoist_globals takes --tls-verify=BOOL; this is the spelling it leaves to typer
        G.tls_verify = tls_verify
    from ..settings import amend

    amend(queue=G.queue, progress=G.progress, tls_verify=G.tls_verify, json=G.json, debug=G.debug)  # flags typer saw


# Each command's module, in help order. Only the module of the invoked command is loaded (and its
# typer options built): start-up time. A test holds this table to the modules' COMMANDS.
COMMAND_MODULES: dict[str, str] = {
    "init": "setup", "completion": "setup",
    "new": "authoring", "add": "authoring", "edit": "authoring", "refresh": "authoring", "diff": "authoring", "fold": "authoring",
    "files": "files", "remove": "files", "revert": "files",
    "push": "stack", "pop": "stack", "top": "stack", "applied": "stack", "unapplied": "stack", "series": "stack", "next": "stack",
    "previous": "stack",
    "header": "patch_meta", "delete": "patch_meta", "rename": "patch_meta", "move": "patch_meta", "guard": "guards", "select": "guards",
    "port": "port",
    "import": "importing",
    "lock": "apply", "apply": "apply", "restore": "apply", "check": "apply", "overlay-args": "overlay",
    "audit": "audit",
    "verify": "verify",
    "rebase": "rebase",
    "boot": "boot",
    "cache": "cache",  # a group: cache.register adds it
}
_registered: set[str] = set()


def _register(modules: list[str]) -> None:
    """Add the commands of these modules (by short name) to the app, each module once, in help order."""
    for short in dict.fromkeys(modules):
        if short in _registered:
            continue
        _registered.add(short)
        module = import_module(f"{__package__}.{short}")
        if short == "cache":
            module.register(_app)
            continue
        for name, fn in module.COMMANDS.items():
            _app.command(name, cls=Command)(fn)
    # help lists commands as registered: keep the table's order whatever was loaded first
    order = list(COMMAND_MODULES)
    _app.registered_commands.sort(key=lambda info: order.index(info.name))


def register_all() -> None:
    """Every command, in help order (help, completion, the reference, an unknown name's suggestions)."""
    _register(list(COMMAND_MODULES.values()))


def register_for(args: list[str]) -> None:
    """Only the module of the command args name; everything where typer must know every command."""
    if args == ["--version"]:  # answered by an eager callback before any command is looked up
        return
    if args and args[0] in COMMAND_MODULES:
        _register([COMMAND_MODULES[args[0]]])
    else:
        register_all()


def whole() -> typer.Typer:
    """The app with every command registered (the reference, the docs, the tests)."""
    register_all()
    return _app


def run_app(args: list[str]) -> Any:
    """Parse args with typer and run the command they name (its module registered first)."""
    from .fastparams import install

    install()  # plain options without pydantic: start-up time
    if args[:1] == ["guard"]:
        from .guards import guard_argv

        args = guard_argv(args)
    register_for(args)
    return _app(args=args, prog_name="imgquilt", standalone_mode=False)


def complete(complete_var: str) -> Any:
    """Shell completion: typer's, over every command."""
    from typer.completion import completion_init

    from .fastparams import install

    install()
    register_all()
    completion_init()
    return _app(prog_name="imgquilt", complete_var=complete_var)
