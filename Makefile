# Two set-up commands for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: test demo docs bench interop browser clean

# TORCH_INDEX: an index to take torch and torchvision from before the rest, e.g. PyTorch's CPU-only wheels
# (make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu): PyPI's Linux wheels bring NVIDIA's CUDA libraries
# and Triton (4.1 GB) whether or not the machine has a GPU.
TORCH_INDEX ?=
TORCH_PINS := $(shell sed -n 's/^ *"\(torch[a-z]*[<>=][^"]*\)",$$/\1/p' pyproject.toml)

$(PY):
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(if $(TORCH_INDEX),$(PY) -m pip install --quiet --index-url $(TORCH_INDEX) $(foreach pin,$(TORCH_PINS),'$(pin)'))

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP) $(DEMO_STAMP)

# What the demo needs only (no development extra: Ray, OpenDP, the test tools); make test installs the rest.
$(DEMO_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[demo]'
	touch $(DEMO_STAMP)

# Headless Chromium for the page tests (tests/support/browser.py): Debian's package, installed when missing and this is
# root with apt-get; elsewhere the browser tests skip (LDPCLIENT_REQUIRE_BROWSER=1, as in .ci/run, fails them).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Chromium (Debian package) for the page tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "no Chromium and no root apt-get here: the browser tests will skip"; fi

test: $(STAMP) browser
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m mypy --strict --follow-imports=silent ldpclient/privacy ldpclient/teachers
	$(PY) -m pytest -q -n auto --maxprocesses 4 --dist loadgroup --durations=25

demo: $(DEMO_STAMP)
	$(VENV)/bin/ldpclient demo --workdir out --html out/demo.html

# The option tables of docs/ from the --help texts (tests/test_docs.py fails when they drift).
docs: $(STAMP)
	$(PY) -m ldpclient.cli.reference docs/*.md

# Interop with real inference servers from PyPI, each in a venv of its own (their pins never touch ours).
INTEROP_MLSERVER_VENV := .venv-interop-mlserver
INTEROP_KSERVE_VENV := .venv-interop-kserve
INTEROP_TRITON_VENV := .venv-interop-triton

$(INTEROP_MLSERVER_VENV)/.installed:
	$(PYTHON) -m venv $(INTEROP_MLSERVER_VENV) || python3 -m venv $(INTEROP_MLSERVER_VENV)
	$(INTEROP_MLSERVER_VENV)/bin/python -m pip install --quiet mlserver==1.7.1
	touch $@

$(INTEROP_KSERVE_VENV)/.installed:
	$(PYTHON) -m venv $(INTEROP_KSERVE_VENV) || python3 -m venv $(INTEROP_KSERVE_VENV)
	$(INTEROP_KSERVE_VENV)/bin/python -m pip install --quiet kserve==0.21.0
	touch $@

$(INTEROP_TRITON_VENV)/.installed:
	$(PYTHON) -m venv $(INTEROP_TRITON_VENV) || python3 -m venv $(INTEROP_TRITON_VENV)
	$(INTEROP_TRITON_VENV)/bin/python -m pip install --quiet nvidia-pytriton==0.7.0
	touch $@

interop: $(STAMP) $(INTEROP_MLSERVER_VENV)/.installed $(INTEROP_KSERVE_VENV)/.installed $(INTEROP_TRITON_VENV)/.installed
	INTEROP_MLSERVER=$(INTEROP_MLSERVER_VENV)/bin/mlserver INTEROP_KSERVE_PYTHON=$(INTEROP_KSERVE_VENV)/bin/python \
		INTEROP_TRITON_PYTHON=$(INTEROP_TRITON_VENV)/bin/python $(PY) -m pytest -q interop

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) $(INTEROP_MLSERVER_VENV) $(INTEROP_KSERVE_VENV) $(INTEROP_TRITON_VENV) .pytest_cache build *.egg-info
