"""Every setting imgquilt reads from its environment, declared once; the frozen `Settings` they make.

`VARS` declares each `IMGQUILT_*` variable: its default and what it means (docs/settings.md is generated
from it: `python -m imgquilt.settings --markdown`, and tests/house/test_settings.py keeps the two equal).
`Settings.from_env()` reads them all, with the global command-line flags on top (`--queue`,
`--tls-verify`, `--progress`, `--quiet`, `--json`, `--debug`). The modules that use a setting read it
from `current()`: the settings the CLI put in force for its command (`use`), else, for a program that
calls imgquilt's functions, the environment as it is at that call. Each owner parses its own value
(and names the variable in its error), so a bad value fails where it is used, as before.

Only the standard library is imported here: the CLI builds its settings before any command module.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import Iterator, Mapping


@dataclass(frozen=True)
class Var:
    """One environment variable: the Settings field it fills, its default, what it does, where it is told."""

    name: str
    field: str
    default: str
    meaning: str
    page: str


VARS: tuple[Var, ...] = (
    Var(
        "IMGQUILT_QUEUE",
        "queue",
        "the nearest directory at or above the working directory holding `series`",
        "The queue directory, when `--queue DIR` is not given.",
        "cli.md",
    ),
    Var(
        "IMGQUILT_CACHE_DIR",
        "cache_dir",
        "`$XDG_CACHE_HOME/imgquilt`, else `~/.cache/imgquilt`",
        "Where the shared cache of manifests, configs and layer indexes lives.",
        "image-references.md",
    ),
    Var(
        "IMGQUILT_CACHE_MAX",
        "cache_max",
        "`20G`",
        "The shared cache's cap: bytes, or a number with K, M, G or T; 0 for no cap. The least recently "
        "used entries go first.",
        "image-references.md",
    ),
    Var(
        "IMGQUILT_CACHE_KEY",
        "cache_key",
        "derived from the journal key (IMGQUILT_STATE_DIR)",
        "The secret (at least 32 characters) that seals the shared cache's entries, for a cache shared "
        "by several users or machines.",
        "image-references.md",
    ),
    Var(
        "IMGQUILT_NO_CACHE",
        "no_cache",
        "unset (the cache is used)",
        "Any value but empty or `0` turns the shared cache off: every read decompresses, as a cold run.",
        "image-references.md",
    ),
    Var(
        "IMGQUILT_STATE_DIR",
        "state_dir",
        "`$XDG_STATE_HOME/imgquilt`, else `~/.local/state/imgquilt`",
        "Where the journal key (journal.key) lives: the key that seals the journals of interrupted writes.",
        "series.md",
    ),
    Var(
        "IMGQUILT_TLS_VERIFY",
        "tls_verify",
        "`true`",
        "`false` (or `0`, `no`) reaches any registry without TLS verification or over HTTP, as "
        "`--tls-verify=false` does; loopback registries and registries.conf `insecure = true` never verify.",
        "image-references.md",
    ),
    Var(
        "IMGQUILT_REGISTRY_DEADLINE",
        "registry_deadline",
        "`300`",
        "Seconds a registry request may take to answer, retries included (a body gets more time by its size).",
        "image-references.md",
    ),
    Var(
        "IMGQUILT_LAYER_READS",
        "layer_reads",
        "`3`",
        "How many layers a cold image read fetches and decompresses at once; 1 reads one at a time.",
        "performance.md",
    ),
    Var(
        "IMGQUILT_LOCAL_TOC",
        "local_toc",
        "`auto`",
        "How a local zstd:chunked layer with no tar-split is read: `auto` (walked with its TOC when that costs "
        "less than reading it whole: large files), `walk` or `whole`.",
        "image-references.md",
    ),
    Var(
        "IMGQUILT_PROGRESS",
        "progress",
        "`auto`",
        "Progress of image reads on stderr when `--progress` is not given: `auto` (bars on a terminal, "
        "plain lines off one for long reads), `plain` or `never`.",
        "cli.md",
    ),
    Var(
        "IMGQUILT_IN_MEMORY_MAX",
        "in_memory_max",
        "`64M`",
        "The largest content held in memory whole (a patch file parsed, a .py file checked, a file diffed "
        "or merged); larger is refused with exit 6 naming this setting.",
        "performance.md",
    ),
    Var(
        "IMGQUILT_SPOOL_AT",
        "spool_at",
        "`8M`",
        "Contents larger than this are carried in a temp file instead of memory (never above IMGQUILT_IN_MEMORY_MAX).",
        "performance.md",
    ),
    Var(
        "IMGQUILT_SPOOL_DIR",
        "spool_dir",
        "imgquilt's own spool directory, else the system's temp directory",
        "Where spooled contents' temp files go.",
        "performance.md",
    ),
    Var(
        "IMGQUILT_EDITOR",
        "editor",
        "unset (`$VISUAL`, else `$EDITOR`, on a terminal only)",
        "The editor `edit` and `header --edit` run, on a terminal or not (scripts, tests).",
        "cli.md",
    ),
    Var(
        "IMGQUILT_KEY_PASSWORD",
        "key_password",
        "unset",
        "The passphrase of an encrypted private key given to `--attest`.",
        "provenance.md",
    ),
    Var(
        "IMGQUILT_PYC_CPU_SECONDS",
        "pyc_cpu_seconds",
        "`10`",
        "CPU seconds one bytecode comparison may take in its child process (the kernel stops it after).",
        "runtime-truth.md",
    ),
    Var(
        "IMGQUILT_PYC_CHILDREN",
        "pyc_children",
        "the number of cores, at most 4",
        "How many bytecode comparisons run at once.",
        "runtime-truth.md",
    ),
    Var(
        "IMGQUILT_PYCHECK_WORKERS",
        "pycheck_workers",
        "the number of cores",
        "How many worker processes the Python check parses files in, when a run has enough source to "
        "pay for them (256 KiB); 1 checks everything in imgquilt's own process.",
        "performance.md",
    ),
    Var(
        "IMGQUILT_SANDBOX",
        "sandbox",
        "`auto` (unshare, then bwrap, then podman)",
        "How `boot` makes its sandbox: `unshare`, `bwrap` or `podman`, or several comma-separated in the order to try; "
        "the first that works is used, and when none does, exit 6 names each one tried and why it failed.",
        "boot.md",
    ),
    Var(
        "IMGQUILT_NO_RUFF",
        "no_ruff",
        "unset (ruff screens the files when it is installed)",
        "Any value turns the ruff screen of the Python check off (pyflakes alone judges).",
        "decisions.md",
    ),
)
# set by the shell for completion, never by a user (click's protocol): read before anything else
COMPLETE_VAR = "_IMGQUILT_COMPLETE"


@dataclass(frozen=True)
class Settings:
    """The values of VARS (None: unset; each owner says what an empty one means) and the global flags."""

    queue: str | None = None
    cache_dir: str | None = None
    cache_max: str | None = None
    cache_key: str | None = None
    no_cache: str | None = None
    state_dir: str | None = None
    tls_verify: str | None = None
    registry_deadline: str | None = None
    layer_reads: str | None = None
    local_toc: str | None = None
    progress: str | None = None
    in_memory_max: str | None = None
    spool_at: str | None = None
    spool_dir: str | None = None
    editor: str | None = None
    key_password: str | None = None
    pyc_cpu_seconds: str | None = None
    pyc_children: str | None = None
    pycheck_workers: str | None = None
    no_ruff: str | None = None
    sandbox: str | None = None
    # global flags only (no variable)
    json: bool = False
    debug: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **flags: object) -> Settings:
        """The settings of `environ` (default: os.environ), each flag given (not None) on top of its variable."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {v.field: env.get(v.name) for v in VARS}
        known = {f.name for f in fields(cls)}
        for name, value in flags.items():
            if name not in known:
                raise TypeError(f"no setting {name!r}")
            if value is not None:
                values[name] = value
        return cls(**values)  # type: ignore[arg-type]

    def of(self, name: str) -> str | None:
        """The value of the variable `name` (IMGQUILT_...), for a module that keeps the name as a constant."""
        return getattr(self, _FIELD_OF[name])

    def flag(self, field: str) -> bool:
        """A yes/no variable (IMGQUILT_NO_CACHE): set to anything but empty or `0`."""
        return (getattr(self, field) or "") not in ("", "0")


_FIELD_OF = {v.name: v.field for v in VARS}
_in_force: list[Settings] = []  # the settings `use` put in force, innermost last (the CLI's, for one command)


def current() -> Settings:
    """The settings in force: the CLI's for its command, else the environment as it is now."""
    return _in_force[-1] if _in_force else Settings.from_env()


@contextmanager
def use(settings: Settings) -> Iterator[Settings]:
    """Put `settings` in force for the code run inside (the CLI: one command)."""
    _in_force.append(settings)
    depth = len(_in_force)
    try:
        yield settings
    finally:
        del _in_force[depth - 1 :]  # amend() may have replaced it: by position, not by value


def amend(**changes: object) -> None:
    """Change the settings in force (the CLI's late flags: `--tls-verify BOOL` parsed by typer). A flag
    not given (None) leaves its variable's value, as in from_env (IMGQUILT_PROGRESS=plain was lost so)."""
    changes = {k: v for k, v in changes.items() if v is not None}
    if _in_force and changes:
        _in_force[-1] = replace(_in_force[-1], **changes)  # type: ignore[arg-type]


def markdown() -> str:
    """docs/settings.md: every variable, its default and meaning."""
    out = [
        "# Settings",
        "",
        "Every environment variable imgquilt reads (generated from `tool/imgquilt/settings.py` by",
        "`python -m imgquilt.settings --markdown`; a test keeps this page equal to it). A global flag given on",
        "the command line wins over its variable: `--queue` over IMGQUILT_QUEUE, `--tls-verify` over",
        "IMGQUILT_TLS_VERIFY, `--progress` and `--quiet` over IMGQUILT_PROGRESS.",
        "",
        "| variable | default | meaning | more |",
        "| --- | --- | --- | --- |",
    ]
    for v in VARS:
        out.append(f"| `{v.name}` | {v.default} | {v.meaning} | [{v.page}]({v.page}) |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # python -m imgquilt.settings --markdown
    if sys.argv[1:] != ["--markdown"]:
        sys.exit("usage: python -m imgquilt.settings --markdown")
    sys.stdout.write(markdown())
