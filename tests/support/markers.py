"""Which markers a test gets, keyed on what it uses (read from the source, not declared by hand).

A test `uses` a tool when its function, a fixture it requests, or any module-level function, class or
constant of the test modules it reaches by name (in its own module or imported from a helper module
under tests/) runs it: a call `run("umoci", ...)`, `Popen(["skopeo", ...])` or `shutil.which("strace")`,
or a list/tuple literal starting with the tool's name. Each tool puts `tools` on the test, strace also
`crash`, docker-registry, htpasswd and apt-get also `network`; a loopback server (socket, http.server)
puts `network`. A test that starts imgquilt processes (a list `[..., "-m", "imgquilt", ...]`, as
qtools.imgquilt runs the console script) is `slow`: each command costs a process start (0.2-0.5 s on 2
cores), and a CLI session runs a dozen; so is a test in the hand-kept table SLOW below (measured).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

from support.tools import EXTRA_MARK, TOOLS

TESTS = Path(__file__).resolve().parent.parent
# calls whose first argument names the program they run or look for
RUNNERS = {"run", "Popen", "check_output", "check_call", "call", "which", "needs", "execvp", "spawnvp"}
NETWORK_NAMES = {"socket", "HTTPServer", "ThreadingHTTPServer", "create_connection", "socketserver"}

# file::function (the file's basename, unique across tests/; no parameters) -> why it is slow:
# every unit test of 1 s or more in `pytest --durations=60`
# on 2 cores under a load of 8-12 (issue 33's measurement; the times are that run's);
# a slow unit test runs in `make test`, not in `make check`
SLOW: dict[str, str] = {
    "test_binary_caps.py::test_fuzz_of_the_binary_decoder_under_a_memory_cap": "fuzz under a memory cap, 170 s",
    "test_binary_caps.py::test_the_fuzz_would_catch_an_uncapped_inflate": "fuzz, 23 s",
    "test_transcripts.py::test_transcript": "CLI sessions replayed in a shell, 3-40 s each",
    "test_docs.py::test_tutorial_runs_as_written": "the tutorial's CLI session, 24 s",
    "test_install.py::test_make_demo_says_where_the_command_is_and_writes_no_escape_codes_into_a_pipe": "make demo, 10 s",
    "test_api.py::test_the_worked_example_in_docs_api_runs": "docs/api.md's example in a child, 1.6 s",
    "test_cli_reference.py::test_cli_reference_is_up_to_date": "builds every command's help, 5 s",
    "test_schemas.py::test_schemas_are_valid_json_schema": "every schema through jsonschema's meta-schema, 2.4 s",
    "test_fastparams.py::test_plain_values_are_coerced_without_pydantic": "a child that imports typer, 1.6 s",
    "test_gate.py::test_a_test_that_runs_a_missing_tool_is_skipped_naming_it": "a pytest session in a child, 9 s",
    "test_gate.py::test_in_ci_a_skip_for_a_tool_ci_installs_fails_the_run": "a pytest session in a child, 6 s",
    "test_gate.py::test_the_markers_leave_the_unit_tests_to_the_fast_gate": "two pytest sessions in children, 11 s",
    "test_ruffscreen.py::test_the_screen_flags_what_pyflakes_finds_on_this_repository": "ruff and pyflakes on the whole tree, 37 s",
    "test_ruffscreen.py::test_the_names_ruff_defines_and_pyflakes_does_not_are_all_screened": "28 s",
    "test_ruffscreen.py::test_in_place_apply_refused_by_the_check_after_staging_leaves_the_root_exactly_old": "12-14 s each",
    "test_ruffscreen.py::test_in_place_apply_with_a_clean_check_writes_everything": "11 s",
    "test_ruffscreen.py::test_findings_depend_on_the_file_name_too": "6 s",
    "test_ruffscreen.py::test_the_gate_runs_between_staging_and_commit": "3 s",
    "test_ruffscreen.py::test_a_failing_screen_steps_aside": "1.5 s",
    "test_inplace_hostile.py::test_journal_is_written_once_per_phase": "28 s",
    "test_interop_patch.py::test_canonical_section_round_trips_and_applies": "hypothesis, 20 s",
    "test_hostile_patch_fuzz.py::test_imgquilt_agrees_with_gnu_patch_or_refuses_as_bad_input": "fuzz, 12 s",
    "test_hostile_tarwalk.py::test_same_members_same_bytes_as_tarfile": "hypothesis, 9 s",
    "test_hostile_tarwalk.py::test_malformed_archives_are_bad_input_or_walk": "hypothesis, 8 s",
    "test_engine.py::test_property_any_bytes_round_trip": "hypothesis, 9 s",
    "test_hostile_bytecode.py::test_each_pyc_is_judged_in_its_own_bounded_child": "children under rlimits, 7 s",
    "test_bytecode_engine.py::test_optimisation_levels_are_compared_at_their_level": "1 s",
    "test_streamed_paths.py::test_patch_files_read_as_they_stream_parse_as_in_memory": "4 s",
    "test_streamed_paths.py::test_hunks_applied_in_pieces_give_the_same_bytes_and_errors": "3.4 s",
    "test_streamed_paths.py::test_binary_deltas_applied_as_they_stream_give_the_same_bytes_and_errors": "hypothesis, 1.4 s",
    "test_audit.py::test_undo_change_of_a_result_is_its_base": "2.2 s",
    "test_rebase.py::test_a_clean_merge_that_breaks_python_stops_as_a_conflict": "1.6 s",
    "test_rebase.py::test_a_target_moved_to_python3_12_is_found_and_remapped": "1.3 s",
    "test_rebase.py::test_abort_restores_the_queue_byte_for_byte": "1.4 s",
    "test_rebase.py::test_missing_old_bases_need_from_and_a_filled_store_does_not": "1.1 s",
    "test_rebase.py::test_same_image_again_carries_everything_unchanged": "1.1 s",
    "test_rebase.py::test_the_quilt_work_tree_is_left_as_it_was": "1.3 s",
    "test_documents.py::test_each_renderer_renders_a_real_result_its_schema_accepts": "the verbs' session on the demo queue, 17-30 s",
}


@dataclass
class _Module:
    uses: dict[str, set[str]] = field(default_factory=dict)  # top-level name -> tools/keys it uses itself
    refs: dict[str, set[str]] = field(default_factory=dict)  # top-level name -> names it refers to
    far: dict[str, set[tuple[str, str]]] = field(default_factory=dict)  # top-level name -> (module, name) it reaches
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)  # local name -> (module, name)


def _first_tool(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        word = node.value.rsplit("/", 1)[-1]  # "/usr/bin/strace" too
        return word if word in TOOLS else None
    return None


def _runs_imgquilt(elts: list[ast.expr]) -> bool:
    """`[sys.executable, "-m", "imgquilt", ...]`: a new imgquilt process (0.2-0.5 s to start on 2 cores)."""
    words = [e.value for e in elts if isinstance(e, ast.Constant)]
    return any(a == "-m" and b == "imgquilt" for a, b in zip(words, words[1:]))


def _direct_uses(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            if name in RUNNERS and (tool := _first_tool(node.args[0])):
                found.add(tool)
        elif isinstance(node, (ast.List, ast.Tuple)) and node.elts and (tool := _first_tool(node.elts[0])):
            found.add(tool)
        elif isinstance(node, (ast.List, ast.Tuple)) and _runs_imgquilt(node.elts):
            found.add("@cli")
        elif isinstance(node, ast.Name) and node.id in NETWORK_NAMES:
            found.add("@network")
        elif isinstance(node, ast.Attribute) and node.attr in NETWORK_NAMES:
            found.add("@network")
    return found


def _names(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def _local_imports(tree: ast.AST) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """Imports inside a function: `from m import x` (x -> (m, x)) and `import m as a` / `from p import m`
    when m is a test module (a -> m), so that `a.name` is followed too."""
    names: dict[str, tuple[str, str]] = {}
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                names[a.asname or a.name] = (node.module, a.name)
                if (TESTS / node.module.replace(".", "/") / f"{a.name}.py").is_file():
                    modules[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                modules[a.asname or a.name] = a.name
    return names, modules


def _attr_refs(tree: ast.AST, modules: dict[str, str]) -> set[tuple[str, str]]:
    return {
        (modules[n.value.id], n.attr)
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in modules
    }


_MODULES: dict[str, _Module | None] = {}


def _path(name: str) -> Path | None:
    """The file of the test or helper module `name`: where it was imported from (a test module sits in
    the folder of the package it proves, imported by its basename), else by its dotted name below tests/."""
    file = getattr(sys.modules.get(name), "__file__", None)
    if file and Path(file).resolve().is_relative_to(TESTS):
        return Path(file).resolve()
    return TESTS / (name.replace(".", "/") + ".py")


def _module(name: str) -> _Module | None:
    """The analysis of the test or helper module `name` (None for modules outside tests/)."""
    if name in _MODULES:
        return _MODULES[name]
    path = _path(name)
    if path is None or not path.is_file():
        _MODULES[name] = None
        return None
    m = _Module()
    _MODULES[name] = m
    tree = ast.parse(path.read_text(), str(path))
    for stmt in tree.body:
        targets: list[str] = []
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            targets = [stmt.name]
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            tgts = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            targets = [n.id for t in tgts for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0:
            for a in stmt.names:
                m.imports[a.asname or a.name] = (stmt.module, a.name)
            continue
        else:
            continue
        local, modules = _local_imports(stmt)
        for t in targets:
            m.uses.setdefault(t, set()).update(_direct_uses(stmt))
            m.refs.setdefault(t, set()).update(_names(stmt) - {t} - set(local))
            m.far.setdefault(t, set()).update(set(local.values()) | _attr_refs(stmt, modules))
    return m


_REACHED: dict[tuple[str, str], frozenset[str]] = {}


def uses(module: str, start: set[str]) -> set[str]:
    """_uses of each name, memoized (the tests of a module share most of what they reach)."""
    found: set[str] = set()
    for name in start:
        if (module, name) not in _REACHED:
            _REACHED[(module, name)] = frozenset(_uses(module, {name}))
        found |= _REACHED[(module, name)]
    return found


def _uses(module: str, start: set[str]) -> set[str]:
    """Every tool (and "@network") reached from the names `start` of `module`, following names."""
    found: set[str] = set()
    seen: set[tuple[str, str]] = set()
    todo = [(module, s) for s in start]
    while todo:
        mod, name = todo.pop()
        if (mod, name) in seen:
            continue
        seen.add((mod, name))
        m = _module(mod)
        if m is None:
            continue
        if name in m.imports:
            todo.append(m.imports[name])
            continue
        found |= m.uses.get(name, set())
        todo.extend((mod, r) for r in m.refs.get(name, ()))
        todo.extend(m.far.get(name, ()))
    return found


def marks_for(found: set[str]) -> set[str]:
    marks = {"network"} if "@network" in found else set()
    if "@cli" in found:
        marks.add("slow")  # a CLI session: every command a new process
    for tool in found - {"@network", "@cli"}:
        marks.add("tools")
        if tool in EXTRA_MARK:
            marks.add(EXTRA_MARK[tool])
    return marks


def item_uses(item) -> set[str]:  # item: pytest.Function
    """What a collected test uses: its function (or class), its module's pytestmark, its fixtures."""
    fn = getattr(item, "function", None)
    if fn is None:
        return set()
    mod = fn.__module__
    top = fn.__qualname__.split(".")[0]
    found = uses(mod, {top, "pytestmark"})
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        for fdef in info.name2fixturedefs.get(name, ()) if info else ():
            f = getattr(fdef, "func", None)
            fmod = getattr(f, "__module__", None)
            if f is not None and fmod and fmod in sys.modules:
                found |= uses(fmod, {f.__qualname__.split(".")[0]})
    return found
