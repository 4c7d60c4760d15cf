# `make demo` and `make test` work on a fresh machine: each makes the virtualenv it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
OUT := out

.PHONY: demo test venv tools clean bench

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

bench: venv
	$(BIN)/python bench/bench_apply.py
	$(BIN)/python bench/bench_seekable.py
	$(BIN)/python bench/bench_large.py --clean
	$(BIN)/python bench/bench_patches.py
	$(BIN)/python bench/bench_vllm.py
	$(BIN)/python bench/bench_synthetic.py --clean

clean:
	rm -rf $(VENV) $(OUT)
