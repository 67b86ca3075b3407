# Two entry points: `make demo` runs the desk with its demo agent; `make test` runs every check.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ADK_FLOOR := 2.13.0
FLOOR := .venv-adk-floor

.PHONY: demo test test-adk-floor lint bench install constraints clean

# constraints.txt pins the set the suite last passed with; `make constraints` refreshes it (then run make test).
$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]' -c constraints.txt
	touch $@

install: $(BIN)/.installed

# make demo PORT=8081: another port (without PORT: 8080, or the next free one, said on start)
demo: install
	$(BIN)/desk demo $(if $(PORT),--port $(PORT))

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest

# The bridge tests again at the lowest google-adk pyproject.toml claims (CI runs it after make test).
$(FLOOR)/bin/.installed: pyproject.toml constraints-adk-floor.txt
	$(PYTHON) -m venv $(FLOOR)
	$(FLOOR)/bin/python -m pip install --quiet --upgrade pip
	$(FLOOR)/bin/python -m pip install --quiet -e '.[dev]' -c constraints-adk-floor.txt
	touch $@

test-adk-floor: $(FLOOR)/bin/.installed
	$(FLOOR)/bin/python -c "import google.adk; assert google.adk.__version__ == '$(ADK_FLOOR)', google.adk.__version__"
	$(FLOOR)/bin/pytest tests/bridge

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

constraints: install
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/uv pip compile pyproject.toml --extra dev --upgrade --python-version 3.11 --no-header --quiet -o constraints.txt.new
	{ sed -n '1,/^# (uv pip compile/p' constraints.txt; cat constraints.txt.new; } > constraints.txt.tmp
	rm constraints.txt.new && mv constraints.txt.tmp constraints.txt
	echo 'google-adk==$(ADK_FLOOR)' > adk-floor.in
	$(BIN)/uv pip compile pyproject.toml --extra dev --upgrade -c adk-floor.in --python-version 3.11 --no-header --quiet -o constraints.txt.new
	{ sed -n '1,/^# (uv pip compile/p' constraints-adk-floor.txt; cat constraints.txt.new; } > constraints.txt.tmp
	rm constraints.txt.new adk-floor.in && mv constraints.txt.tmp constraints-adk-floor.txt

clean:
	rm -rf $(VENV) $(FLOOR) build *.egg-info .pytest_cache .mypy_cache .ruff_cache test-artifacts
