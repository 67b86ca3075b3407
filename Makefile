# Two entry points: `make demo` runs the desk with its demo agent; `make test` runs every check.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench install clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/.installed

# make demo PORT=8081: another port (without PORT: 8080, or the next free one, said on start)
demo: install
	$(BIN)/desk demo $(if $(PORT),--port $(PORT))

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

# The benchmarks print JSON; audit_bench runs CHAP (the `bench` extra) side by side.
bench: install
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python tests/benchmarks/audit_bench.py
	$(BIN)/python tests/benchmarks/bridge_bench.py
	$(BIN)/python tests/benchmarks/gate_bench.py
	$(BIN)/python tests/benchmarks/desk_bench.py
	$(BIN)/python tests/benchmarks/notify_bench.py
	$(BIN)/python tests/benchmarks/scale_bench.py
	$(BIN)/python tests/benchmarks/cli_bench.py
	$(BIN)/python tests/benchmarks/values_bench.py
	$(BIN)/python tests/benchmarks/telemetry_bench.py
	$(BIN)/python tests/benchmarks/many_logs_bench.py
	$(BIN)/python tests/benchmarks/sso_bench.py
	$(BIN)/python tests/benchmarks/growth_bench.py
	$(BIN)/python tests/benchmarks/desk_scale_bench.py
	$(BIN)/python tests/benchmarks/decisions_processes.py
	$(BIN)/python tests/benchmarks/tool_threads_bench.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache test-artifacts
