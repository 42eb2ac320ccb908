# Two set-up commands for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo bench clean

$(PY):
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q

demo: $(STAMP)
	$(VENV)/bin/ldpclient demo

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
