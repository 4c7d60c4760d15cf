"""One settings object: every IMGQUILT_* variable declared in imgquilt.settings (docs/settings.md is made
from it), read nowhere else, and the global flags carried in it, not written into the environment."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from imgquilt import settings
from imgquilt.settings import VARS, Settings
from support.qtools import REPO, TOOL

PACKAGE = TOOL / "imgquilt"


def test_the_settings_page_is_made_from_the_declarations() -> None:
    page = (REPO / "docs" / "settings.md").read_text()
    made = subprocess.run(
        [sys.executable, "-m", "imgquilt.settings", "--markdown"],
        env={**os.environ, "PYTHONPATH": str(TOOL)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert page == made == settings.markdown(), "regenerate: python -m imgquilt.settings --markdown > docs/settings.md"


def test_every_variable_the_code_names_is_declared_and_every_declared_one_is_used() -> None:
    declared = {v.name for v in VARS}
    named: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if path.name != "settings.py":
            named |= set(re.findall(r"(?<![A-Z_])IMGQUILT_[A-Z0-9_]+", path.read_text()))
    assert named <= declared, f"declare these in imgquilt/settings.py: {sorted(named - declared)}"
    fields = {v.field for v in VARS}
    assert fields <= set(Settings.__dataclass_fields__), "each variable has its field"


def _env_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """os.environ.get(X), os.environ[X], os.getenv(X) where X is an IMGQUILT_ name or a *_ENV constant."""
    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
            f = node.func
            environ_get = f.attr == "get" and isinstance(f.value, ast.Attribute) and f.value.attr == "environ"
            if environ_get or f.attr == "getenv":
                key = node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "environ":
            key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("IMGQUILT_"):
            found.append((node.lineno, key.value))
        elif isinstance(key, ast.Name) and key.id.endswith("_ENV"):
            found.append((node.lineno, key.id))
    return found


def test_no_module_but_settings_reads_an_imgquilt_variable_from_the_environment() -> None:
    reads = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "settings.py" and path.parent == PACKAGE:
            continue
        reads += [f"{path.relative_to(TOOL)}:{line}: {what}" for line, what in _env_reads(ast.parse(path.read_text()))]
    assert not reads, "read these through imgquilt.settings.current():\n" + "\n".join(reads)


def test_a_flag_wins_over_its_variable_and_an_unset_one_is_none() -> None:
    env = {"IMGQUILT_TLS_VERIFY": "true", "IMGQUILT_PROGRESS": "plain", "IMGQUILT_CACHE_MAX": "1G"}
    s = Settings.from_env(env, tls_verify="false", progress=None)
    assert (s.tls_verify, s.progress, s.cache_max, s.queue) == ("false", "plain", "1G", None)
    assert s.of("IMGQUILT_CACHE_MAX") == "1G" and not s.flag("no_cache")
    assert Settings.from_env({"IMGQUILT_NO_CACHE": "0"}).flag("no_cache") is False
    assert Settings.from_env({"IMGQUILT_NO_CACHE": "1"}).flag("no_cache") is True


def test_tls_verify_on_the_command_line_reaches_the_registry_code_without_the_environment(monkeypatch) -> None:
    from imgquilt.cli.common import G, hoist_globals
    from imgquilt.image.sources.registry import tls_verify

    monkeypatch.delenv("IMGQUILT_TLS_VERIFY", raising=False)
    monkeypatch.setattr(G, "tls_verify", None)
    assert hoist_globals(["--tls-verify=false", "audit"]) == ["audit"]
    assert "IMGQUILT_TLS_VERIFY" not in os.environ
    assert tls_verify() is None  # verify: the flag is the command's, not the process's
    with settings.use(G.settings()):
        assert tls_verify() is False
    assert tls_verify() is None


def test_without_the_cli_a_setting_is_the_environment_as_it_is_at_the_call(monkeypatch, tmp_path: Path) -> None:
    from imgquilt.cache import cache_root

    monkeypatch.setenv("IMGQUILT_CACHE_DIR", str(tmp_path / "one"))
    assert cache_root() == tmp_path / "one"
    monkeypatch.setenv("IMGQUILT_CACHE_DIR", str(tmp_path / "two"))
    assert cache_root() == tmp_path / "two"
    with settings.use(Settings.from_env(cache_dir=str(tmp_path / "three"))):
        assert cache_root() == tmp_path / "three"


def test_a_flag_typer_parses_late_amends_the_settings_in_force(monkeypatch) -> None:
    monkeypatch.delenv("IMGQUILT_TLS_VERIFY", raising=False)
    with settings.use(Settings.from_env({})):
        settings.amend(tls_verify="false")  # `imgquilt --tls-verify false audit ...`: typer's callback
        assert settings.current().tls_verify == "false"
    assert settings.current().tls_verify is None


def test_a_bad_size_setting_is_one_usage_error_in_check_not_a_problem_per_patch(tmp_path: Path) -> None:
    """`check` collects each patch's problems; a bad IMGQUILT_* value is the environment's: exit 2, said once."""
    from support.qtools import copy_demo_queue, imgquilt

    q = copy_demo_queue(tmp_path / "q")
    for var in ("IMGQUILT_IN_MEMORY_MAX", "IMGQUILT_SPOOL_AT"):
        r = imgquilt("check", cwd=q, env={**os.environ, var: "abc"}, check=2)
        assert r.err.count(f"{var}='abc' is not a size") == 1, r.err
