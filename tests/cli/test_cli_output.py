"""What CI and a new user see: -h, completion, readable help, JSON on failure, GitHub annotations,
hints that name only options the command has, and a CLI that imports little to start."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.qtools import CONF, SERVER, TOOL, copy_demo_queue, imgquilt, write_patch

COMMANDS = ["init", "completion", "new", "add", "edit", "refresh", "diff", "fold", "push", "pop", "top", "applied", "unapplied",
            "series", "header", "delete", "rename", "import", "lock", "apply", "restore", "check", "overlay-args", "audit", "rebase"]


def test_dash_h_and_readable_help_for_every_command(tmp_path: Path) -> None:
    top = imgquilt("-h", cwd=tmp_path, check=0).out
    assert top.startswith("Usage: imgquilt [OPTIONS] COMMAND")
    for cmd in COMMANDS:
        assert re.search(rf"^  {cmd}\s", top, re.M), cmd
        h = imgquilt(cmd, "-h", cwd=tmp_path, check=0).out
        assert h.startswith(f"Usage: imgquilt {cmd} "), cmd
        assert "<str>" not in h and "<list" not in h and "<int>" not in h, cmd
        # examples: one per line, each starting with the command (never run together into one paragraph)
        examples = h.split("Example")[1].split("Options:")[0].splitlines()[1:]
        lines = [line.strip() for line in examples if line.strip()]
        assert lines, cmd
        for line in lines:
            assert line.count("imgquilt ") <= 1 or "&&" in line, (cmd, line)


def test_metavars_name_what_to_pass(tmp_path: Path) -> None:
    h = imgquilt("apply", "-h", cwd=tmp_path, check=0).out
    for opt in ("--image REF", "--layer FILE", "--output-image REF", "--root DIR", "--platform OS/ARCH"):
        assert opt in h, opt
    h = imgquilt("new", "-h", cwd=tmp_path, check=0).out
    assert "--field FIELD=VALUE" in h and "--requires PATCH" in h


def test_completion_scripts_and_the_completion_protocol(tmp_path: Path, cli_env) -> None:
    bash = imgquilt("completion", "bash", cwd=tmp_path, check=0).out
    assert "_IMGQUILT_COMPLETE=complete_bash" in bash and bash.rstrip().endswith("complete -o default -F _imgquilt_completion imgquilt")
    assert "compdef imgquilt" in imgquilt("completion", "zsh", cwd=tmp_path, check=0).out
    assert "complete --command imgquilt" in imgquilt("completion", "fish", cwd=tmp_path, check=0).out
    imgquilt("completion", "tcsh", cwd=tmp_path, check=2)
    # what the bash script asks at a TAB: the commands (and options) that fit
    env = {**cli_env, "_IMGQUILT_COMPLETE": "complete_bash", "COMP_WORDS": "imgquilt re", "COMP_CWORD": "1"}
    r = imgquilt(cwd=tmp_path, env=env, check=0)
    assert r.out.split() == ["refresh", "remove", "revert", "rename", "restore", "rebase"]
    env.update(COMP_WORDS="imgquilt apply --ro", COMP_CWORD="2")
    assert imgquilt(cwd=tmp_path, env=env, check=0).out.split() == ["--root"]


@pytest.mark.parametrize("args", [
    ["new", "0001-x.patch"], ["add", "etc/x"], ["refresh"], ["diff"], ["push"], ["pop"], ["top"], ["applied"], ["unapplied"],
    ["series"], ["header"], ["delete"], ["rename", "y.patch"], ["lock"], ["apply"], ["check"], ["audit"], ["rebase", "--abort"],
])
def test_json_failure_outside_a_queue_is_one_error_document(tmp_path: Path, cli_env, args: list[str]) -> None:
    r = imgquilt("--json", *args, cwd=tmp_path, env=cli_env, check=2)
    doc = json.loads(r.out)
    assert doc["error"] == {"code": 2, "kind": "queue-not-found", "message": doc["error"]["message"], "hint": doc["error"]["hint"]}
    assert "No queue found" in doc["error"]["message"]
    assert "No queue found" in r.err  # people still get the paragraph on stderr


def test_json_usage_error_of_the_parser_is_a_document_too(tmp_path: Path, cli_env) -> None:
    r = imgquilt("--json", "apply", "--no-such-option", cwd=tmp_path, env=cli_env, check=2)
    assert json.loads(r.out)["error"]["kind"] == "usage-error" and "--no-such-option" in json.loads(r.out)["error"]["message"]


def test_json_drift_in_push_apply_and_check_is_exit_3_everywhere(tmp_path: Path, svc: Path, cli_env) -> None:
    q = tmp_path / "queue"
    q.mkdir()
    write_patch(q, "0001-workers.patch", [("etc/svc.conf", CONF, CONF.replace(b"2", b"8"))])
    (svc / "etc/svc.conf").write_bytes(b"[server]\r\nworkers = 3\r\n")
    for args in (["push", "--image", f"rootfs:{svc}"], ["apply", "--image", f"rootfs:{svc}"], ["check", "--image", f"rootfs:{svc}"],
                 ["lock", "--image", f"rootfs:{svc}"]):
        doc = json.loads(imgquilt("--json", *args, cwd=q, env=cli_env, check=3).out)
        assert doc["error"]["code"] == 3 and doc["error"]["kind"] == "base-drift", args
        assert "base drifted" in doc["error"]["message"] and "rebase" in doc["error"]["message"] + doc["error"]["hint"], args


def test_the_no_python_check_hint_names_the_command_that_was_run(tmp_path: Path, cli_env) -> None:
    root = tmp_path / "root"
    (root / "usr/lib/svc").mkdir(parents=True)
    (root / "usr/lib/svc/server.py").write_bytes(SERVER)
    q = tmp_path / "q"
    q.mkdir()
    write_patch(q, "0001-typo.patch", [("usr/lib/svc/server.py", SERVER, SERVER.replace(b"return PORT", b"return PROT"))])
    r = imgquilt("apply", "--image", f"rootfs:{root}", cwd=q, env=cli_env, check=3)
    assert "PROT" in r.err and "imgquilt apply --no-python-check" in r.err
    r = imgquilt("lock", "--image", f"rootfs:{root}", cwd=q, env=cli_env, check=3)
    assert "PROT" in r.err and "imgquilt lock --no-python-check" in r.err and "apply --no-python-check" not in r.err
    doc = json.loads(imgquilt("--json", "lock", "--image", f"rootfs:{root}", cwd=q, env=cli_env, check=3).out)
    assert doc["error"]["kind"] == "python-check-failed" and "imgquilt lock --no-python-check" in doc["error"]["hint"]
    # the finding's place, in the JSON too
    assert doc["error"]["problems"] == ["0001-typo.patch: the patch adds Python errors: usr/lib/svc/server.py:7:12: "
                                        "UndefinedName: undefined name 'PROT'."]
    imgquilt("lock", "--no-python-check", "--image", f"rootfs:{root}", cwd=q, env=cli_env, check=0)


def test_audit_format_github_annotates_each_patch_not_live(tmp_path: Path, svc: Path, cli_env) -> None:
    q = tmp_path / "queue"
    q.mkdir()
    write_patch(q, "0001-port.patch", [("lib/svc/server.py", SERVER, SERVER.replace(b"8000", b"9000"))])
    write_patch(q, "0002-workers.patch", [("etc/svc.conf", CONF, CONF.replace(b"2", b"8"))])
    imgquilt("apply", "--root", str(svc), cwd=q, env=cli_env, check=0)
    (svc / "etc/svc.conf").write_bytes(CONF)  # someone put the old config back
    r = imgquilt("audit", "--root", str(svc), "--format", "github", cwd=q, env=cli_env, check=5)
    ann = [line for line in r.out.splitlines() if line.startswith("::")]
    assert ann == ["::error file=patches/0002-workers.patch,title=imgquilt audit::0002-workers.patch is pending, not live: etc/svc.conf (pending)."]
    doc = json.loads(imgquilt("audit", "--root", str(svc), "--json", cwd=q, env=cli_env, check=5).out)
    assert doc["error"]["code"] == 5 and doc["error"]["kind"] == "not-live" and doc["summary"]["pending"] == 1


def test_check_format_github_escapes_newlines_and_names_the_file(tmp_path: Path) -> None:
    q = copy_demo_queue(tmp_path / "q")
    with open(q / "series", "a") as f:
        f.write("0001-which-skip-empty-path-elements.patch\n")  # listed twice
    (q / "patches/stray.patch").write_text("Description: x\n\n")
    r = imgquilt("check", "--format", "github", cwd=q, check=6)
    ann = [line for line in r.out.splitlines() if line.startswith("::error ")]
    assert "::error file=series,title=imgquilt check::series lists '0001-which-skip-empty-path-elements.patch' 2 times." in ann
    assert "::error file=patches/stray.patch,title=imgquilt check::patches/stray.patch is not listed in series." in ann


def test_the_cli_imports_no_core_module_to_start() -> None:
    """`imgquilt --version` loads the command modules only: queue, engine, image, work, rebase load on use."""
    code = ("import sys; from imgquilt.cli.main import main; rc = main(['--version']); "
            "print(sorted(m for m in sys.modules if m.startswith(('imgquilt.', 'git', 'unidiff', 'rich.table'))))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(TOOL), "PATH": "/usr/bin:/bin"})
    mods = eval(p.stdout.splitlines()[-1])
    assert mods and all(m.startswith("imgquilt.cli") or m == "imgquilt.errors" for m in mods), mods


def test_one_source_for_the_version(tmp_path: Path) -> None:
    import tomllib

    from imgquilt import __version__

    project = tomllib.loads((TOOL.parent / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "imgquilt.__version__"}
    assert imgquilt("--version", cwd=tmp_path, check=0).out == f"imgquilt {__version__}\n"


def test_json_push_refused_halfway_names_what_went_on(tmp_path: Path, svc: Path, cli_env) -> None:
    q = tmp_path / "queue"
    q.mkdir()
    write_patch(q, "0001-port.patch", [("lib/svc/server.py", SERVER, SERVER.replace(b"8000", b"9000"))])
    write_patch(q, "0002-workers.patch", [("etc/svc.conf", CONF, CONF.replace(b"2", b"8"))])
    (svc / "etc/svc.conf").write_bytes(b"[server]\r\nworkers = 3\r\n")
    doc = json.loads(imgquilt("--json", "push", "-a", "--image", f"rootfs:{svc}", cwd=q, env=cli_env, check=3).out)
    assert doc["pushed"] == ["0001-port.patch"] and doc["top"] == "0001-port.patch"
    assert doc["files"] == {"0001-port.patch": ["lib/svc/server.py"]}
    assert doc["error"]["code"] == 3 and "0002-workers.patch" in doc["error"]["message"]
    assert imgquilt("top", cwd=q, env=cli_env, check=0).out == "0001-port.patch\n"


def test_the_command_table_names_every_command_in_its_module() -> None:
    """main.COMMAND_MODULES (what loads lazily) is exactly the modules' COMMANDS, in help order."""
    from importlib import import_module

    from imgquilt.cli.main import COMMAND_MODULES

    expected: dict[str, str] = {}
    for short in dict.fromkeys(COMMAND_MODULES.values()):
        module = import_module(f"imgquilt.cli.{short}")
        names = ["cache"] if short == "cache" else list(module.COMMANDS)
        expected.update(dict.fromkeys(names, short))
    assert COMMAND_MODULES == expected and list(COMMAND_MODULES) == list(expected)


def _modules_after(args: list[str], tmp_path: Path) -> tuple[str, list[str]]:
    code = (f"import sys; from imgquilt.cli.main import main; rc = main({args!r}); "
            "print(rc, sorted(m for m in sys.modules if m.startswith(('imgquilt.cli.', 'typer'))))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env={"PYTHONPATH": str(TOOL), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    rc, mods = p.stdout.splitlines()[-1].split(" ", 1)
    return rc, eval(mods)


COMMAND_MODULES = {"setup", "authoring", "files", "stack", "patch_meta", "importing", "apply", "audit", "rebase", "cache"}


def test_a_command_loads_only_its_own_command_module(tmp_path: Path) -> None:
    """`imgquilt pop` builds the typer options of the stack commands only: start-up time."""
    rc, mods = _modules_after(["pop"], tmp_path)
    assert [m for m in mods if m.split(".")[-1] in COMMAND_MODULES and m.startswith("imgquilt.")] == ["imgquilt.cli.stack"]
    assert rc == "2"  # no queue here: the usage error, as before


@pytest.mark.parametrize("args", [["top"], ["applied"], ["series", "-v"], ["header"], ["header", "x.patch"], ["check"], ["--version"]])
def test_the_quick_commands_load_no_typer(tmp_path: Path, args: list[str]) -> None:
    """`imgquilt top` and the other plain listings run straight from argv: no typer, no command module."""
    rc, mods = _modules_after(args, tmp_path)
    assert not [m for m in mods if m.startswith("typer") or m.split(".")[-1] in COMMAND_MODULES and m.startswith("imgquilt.")], mods
    assert rc == ("0" if args == ["--version"] else "2")


@pytest.mark.parametrize("args, code", [(["series", "-v"], 0), (["--json", "check"], 0), (["audit"], 5), (["top"], 2)])
def test_a_closed_stdout_pipe_keeps_the_commands_own_exit_code(tmp_path: Path, cli_env, args: list[str], code: int) -> None:
    """The reader is gone before imgquilt writes (`| head -c0`): no traceback, no exit 1, the command's own code."""
    q = copy_demo_queue(tmp_path / "q")
    read, write = os.pipe()
    os.close(read)
    try:
        p = subprocess.run([sys.executable, "-m", "imgquilt", *args], cwd=q, env=cli_env, stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)
    assert p.returncode == code, p.stderr.decode()
    assert b"Traceback" not in p.stderr and b"BrokenPipe" not in p.stderr and b"Exception ignored" not in p.stderr
