# Two entry points: `make demo` (the main job) and `make test` (the suite).
# Both create .venv when missing and install what they need.
# TORCH pins the CPU wheel; GPU users override it, e.g. `make demo TORCH='torch==2.14.1'`.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
empty :=
space := $(empty) $(empty)
# The stamp names the torch pin: a changed TORCH reinstalls into the existing .venv.
STAMP := $(VENV)/.installed-$(subst =,_,$(subst /,_,$(subst $(space),_,$(TORCH))))

.PHONY: demo test lint bench gpu-check dist system-deps clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	@echo "Installing glassformer, $(TORCH) and the test tools into $(VENV) (once; a few minutes, mostly downloads)..."
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --progress-bar on -e '.[dev]' '$(TORCH)'
	rm -f $(VENV)/.installed*
	touch '$(STAMP)'

# Debian packages some tests and recipes use (CJK font for plots, Chromium for the
# HTML report tests, Tang poems). Installed only when missing and when we may use apt.
system-deps:
	@./.ci/system-deps

demo: $(STAMP)
	$(BIN)/glassformer demo

test: $(STAMP) system-deps
	$(BIN)/ruff check .
	@echo "Running the test suite: about 12 minutes on 2 CPU cores (the docs pages are the longest part)..."
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/glassformer bench

# The prepared GPU run (docs/benchmarks.md): <= 8 minutes on one NVIDIA GPU (it finds or installs a CUDA
# torch itself); DEVICE=cpu for the dry run, in .venv.
ifeq ($(DEVICE),cpu)
gpu-check: $(STAMP)
	PYTHON=$(BIN)/python bash benchmarks/gpu_check.sh --device cpu
else
gpu-check:
	bash benchmarks/gpu_check.sh --device $(or $(DEVICE),cuda)
endif

# A wheel and an sdist in dist/ (version: src/glassformer/_version.py).
dist: $(STAMP)
	$(BIN)/python -m build --no-isolation --outdir dist .

clean:
	rm -rf $(VENV) build dist src/*.egg-info
