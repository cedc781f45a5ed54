# Two entry points: `make demo` (the main job) and `make test` (the suite); `make notebook` opens
# examples/notebook.ipynb. Each creates .venv when missing and installs only what it needs:
#   demo      the package and the CPU torch pin (no test tools: no pytest)
#   test      the same plus the dev extra (pytest, ruff, the reference libraries)
#   notebook  the same plus the notebook extra (Jupyter's notebook server, ipykernel, ipywidgets)
# Each set has its own stamp: `make demo` then `make test` installs the dev extra once, and neither
# reinstalls what is there.
# TORCH pins the CPU wheel; GPU users override it, e.g. `make demo TORCH='torch==2.14.1'`.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
empty :=
space := $(empty) $(empty)
# The stamps name the torch pin: a changed TORCH reinstalls into the existing .venv.
PIN := $(subst =,_,$(subst /,_,$(subst $(space),_,$(TORCH))))
STAMP := $(VENV)/.installed-$(PIN)
DEV_STAMP := $(VENV)/.installed-dev-$(PIN)
NOTEBOOK_STAMP := $(VENV)/.installed-notebook-$(PIN)

.PHONY: demo test notebook lint bench gpu-check dist system-deps clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The package and torch: what `make demo` needs. A new install (pyproject.toml changed, another
# TORCH) drops every stamp, so the extras follow it.
$(STAMP): pyproject.toml | $(BIN)/python
	@echo "Installing glassformer and $(TORCH) into $(VENV) (once; a few minutes, mostly downloads)..."
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --progress-bar on -e . '$(TORCH)'
	rm -f $(VENV)/.installed*
	touch '$(STAMP)'

$(DEV_STAMP): $(STAMP)
	@echo "Installing the test tools (the dev extra) into $(VENV) (once)..."
	$(BIN)/python -m pip install --progress-bar on -e '.[dev]' '$(TORCH)'
	touch '$(DEV_STAMP)'

$(NOTEBOOK_STAMP): $(STAMP)
	@echo "Installing Jupyter (the notebook extra) into $(VENV) (once)..."
	$(BIN)/python -m pip install --progress-bar on -e '.[notebook]' '$(TORCH)'
	touch '$(NOTEBOOK_STAMP)'

# Debian packages some tests and recipes use (CJK font for plots, Chromium for the
# HTML report tests, Tang poems). Installed only when missing and when we may use apt.
system-deps:
	@./.ci/system-deps

demo: $(STAMP)
	$(BIN)/glassformer demo

test: $(DEV_STAMP) system-deps
	$(BIN)/ruff check .
	@echo "Running the test suite: about 8 minutes on 2 CPU cores (the docs pages are the longest part)..."
	$(BIN)/python -m pytest -q

# The notebook in Jupyter (NOTEBOOK_ARGS, e.g. '--no-browser --port 8890', go to Jupyter).
notebook: $(NOTEBOOK_STAMP)
	$(BIN)/jupyter notebook $(NOTEBOOK_ARGS) examples/notebook.ipynb

lint: $(DEV_STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/glassformer bench

# The prepared GPU run (docs/benchmarks.md): <= 8 minutes on one NVIDIA GPU (it finds or installs a CUDA
# torch itself); DEVICE=cpu for the dry run, in .venv.
ifeq ($(DEVICE),cpu)
gpu-check: $(DEV_STAMP)
	PYTHON=$(BIN)/python bash benchmarks/gpu_check.sh --device cpu
else
gpu-check:
	bash benchmarks/gpu_check.sh --device $(or $(DEVICE),cuda)
endif

# A wheel and an sdist in dist/ (version: src/glassformer/_version.py).
dist: $(DEV_STAMP)
	$(BIN)/python -m build --no-isolation --outdir dist .

clean:
	rm -rf $(VENV) build dist src/*.egg-info
