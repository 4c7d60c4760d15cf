# `make demo` and `make test` work on a fresh machine: each makes the virtualenv it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
OUT := out

.PHONY: demo test check venv tools clean bench

$(BIN)/imgquilt: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

venv: $(BIN)/imgquilt

demo: venv
	bash examples/demo.sh $(BIN)/imgquilt $(OUT)

tools:
	bash .ci/install-tools

test: venv tools
	$(BIN)/python -m pytest -q

# The fast gate (CONTRIBUTING.md): lint, format, types, unit tests; no root, no Debian tools, under 2 minutes.
# `ruff format --check` covers only FORMATTED (files kept in ruff's format; most of the tree predates it):
# a new module joins the list, and a file joins it when it is reformatted whole in a change of its own.
# mypy checks the packages [tool.mypy] lists in pyproject.toml; the unit tests are those with no marker
# that tests/conftest.py sets from what a test runs (tools, crash, network) and none in the slow table.
# The helpers that moved into tests/support/ from tests/ (qtools.py, imagetools.py, ...) keep the format they had.
SUPPORT_FORMATTED := __init__ markers tools killpoints audit_image cache_rows import_trees layer_semantics platforms \
	rebase_cli rebase_stopped registry_queue rehash_queue schemas
FORMATTED := $(SUPPORT_FORMATTED:%=tests/support/%.py) tests/house/test_gate.py tests/house/test_settings.py tests/fs/test_content_model.py \
	tool/imgquilt/settings.py tool/imgquilt/rebase/rerere.py tool/imgquilt/rebase/kept.py tool/imgquilt/rebase/port.py \
	tool/imgquilt/cli/port.py tests/rebase/test_port.py tests/rebase/test_kept_resolutions.py \
	tool/imgquilt/verbs/refs.py tool/imgquilt/verbs/fanout.py tool/imgquilt/verbs/check.py tool/imgquilt/verbs/verify.py tests/verbs/test_fanout.py \
	tool/imgquilt/cli/documents.py tests/cli/test_documents.py \
	tool/imgquilt/util/reader.py tests/util/test_reader_base.py tests/util/test_json_members.py tests/house/test_import_graph.py
UNIT := not tools and not crash and not network and not slow
# the layering checker and its picture live with the project's shared tooling, beside the clone (CI's copy
# too); a clone without them skips this step (docs/architecture.md says what it enforces)
ARCHCHECK := $(firstword $(wildcard ../shared/tools/archcheck.py ../../shared/tools/archcheck.py))
# the modules issue 33 moved out of api.py (rebase, port, import, overlay entries; the rebase guard)
FORMATTED += tool/imgquilt/rebase/verbs.py tool/imgquilt/work/import_verb.py tool/imgquilt/verbs/overlay.py tool/imgquilt/verbs/rebase_guard.py
check: venv
	$(if $(ARCHCHECK),$(BIN)/python $(ARCHCHECK) . $(dir $(ARCHCHECK))../architecture.json,@echo "check: no layering checker beside the clone (../shared/tools/archcheck.py): skipped")
	$(BIN)/ruff check tool tests bench
	$(BIN)/ruff format --check $(FORMATTED)
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "$(UNIT)"

bench: venv
	$(BIN)/python bench/bench_apply.py
	$(BIN)/python bench/bench_seekable.py
	$(BIN)/python bench/bench_large.py --clean
	$(BIN)/python bench/bench_patches.py
	$(BIN)/python bench/bench_vllm.py
	$(BIN)/python bench/bench_synthetic.py --clean

clean:
	rm -rf $(VENV) $(OUT)
