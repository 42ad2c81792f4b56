# Set-up and the two commands of the README. `make demo` and `make test` install first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# On machines without CUDA, pin the CPU wheel: an unpinned torch pulls a multi-GB CUDA build.
TORCH ?= torch==2.13.0

.PHONY: install demo test test-quick lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[all,dev]" "$(TORCH)"
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/autoresearch demo

test: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q

# The inner loop: lint, the import contract, and every test not marked slow.
test-quick: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -m "not slow"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: install
	$(BIN)/pip install -q -e ".[bench]" "$(TORCH)"
	$(BIN)/python bench/launch.py
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/packing.py
	$(BIN)/python bench/metrics.py
	$(BIN)/python bench/mcp.py
	$(BIN)/python bench/search.py
	$(BIN)/python bench/loop.py

clean:
	rm -rf $(VENV) .pytest_cache
