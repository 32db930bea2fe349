# PaperLeet: `make grade` grades every submission; `make test` runs the harness's own tests, `make test-fast` those
# that run in process.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
STAMP := $(VENV)/.installed
PROBLEMS := $(notdir $(patsubst %/problem.toml,%,$(wildcard problems/*/problem.toml)))
JOBS ?= 0

# torch: TORCH=cpu (the default) takes the CPU build from PyTorch's own index, TORCH=cuda whatever the configured
# index offers (the CUDA build on Linux, several GB). Torch alone is installed with --index-url, so no other index
# can shadow it or what it pulls in; numpy and the rest then come from the configured index, as usual. When
# PyTorch's index is out of reach (offline, a mirror only), torch comes from the configured index instead.
TORCH ?= cpu
TORCH_VERSION := 2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# true when $(TORCH_INDEX) answers within 5 s; no retries, so an unreachable index costs seconds, not minutes
INDEX_REACHABLE = $(PY) -c 'import sys, urllib.request as u; u.urlopen(u.Request(sys.argv[1].rstrip("/") + "/torch/", method="HEAD"), timeout=5)' '$(TORCH_INDEX)' 2>/dev/null
# true when the installed torch is the build TORCH asks for (a CPU build has no CUDA version)
TORCH_MATCHES = $(PY) -c 'import sys, torch; sys.exit((torch.version.cuda is None) != (sys.argv[1] == "cpu"))' '$(TORCH)' 2>/dev/null

ifeq ($(filter $(TORCH),cpu cuda),)
$(error TORCH=$(TORCH): expected TORCH=cpu (the default) or TORCH=cuda)
endif
# JOBS is checked before any work: a whole number of submissions graded at once, 0 for one per CPU
ifneq ($(words $(JOBS)) $(shell printf '%s' '$(subst ','',$(JOBS))' | tr -d 0-9),1 )
$(error JOBS=$(JOBS): expected a whole number of submissions graded at once (0: one per CPU))
endif
# the stamp records the torch build installed: asking for the other one installs again
ifneq ($(shell cat $(STAMP) 2>/dev/null),$(TORCH))
.PHONY: $(STAMP)
endif

.PHONY: setup torch grade test test-fast test-slurm previews validate bench lint format typecheck clean

setup: $(STAMP)

# the other build, if installed, goes first: pip would take it as satisfying torch==$(TORCH_VERSION)
ifeq ($(TORCH),cuda)
define install_torch
$(TORCH_MATCHES) || $(PIP) uninstall --quiet --yes torch 2>/dev/null || true
$(PIP) install --quiet torch==$(TORCH_VERSION)
endef
else
define install_torch
$(TORCH_MATCHES) || $(PIP) uninstall --quiet --yes torch 2>/dev/null || true
if $(INDEX_REACHABLE); then \
  $(PIP) install --quiet torch==$(TORCH_VERSION) --index-url $(TORCH_INDEX); \
else \
  echo "setup: $(TORCH_INDEX) is out of reach; installing torch $(TORCH_VERSION) from the configured index"; \
  $(PIP) install --quiet torch==$(TORCH_VERSION); \
fi
endef
endif

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(install_torch)
	$(PIP) install --quiet numpy -e '.[dev]'
	echo $(TORCH) > $(STAMP)

# torch alone, into an existing $(VENV): `make torch TORCH=cuda` switches builds
torch:
	$(install_torch)

previews: setup
	for p in $(PROBLEMS); do $(PY) -m grader previews --problem $$p || exit $$?; done

grade: previews
	for p in $(PROBLEMS); do $(PY) -m grader grade-all --problem $$p --jobs $(JOBS) || exit $$?; done

validate: setup
	for p in $(PROBLEMS); do $(PY) -m grader validate --problem $$p --jobs $(JOBS) || exit $$?; done

# pytest-xdist workers: the tests that read one graded batch share a worker (conftest.py's groups), so a batch is
# still graded once; while one worker waits on a sandboxed worker's timeout or a CLI's start, the other runs.
# TEST_WORKERS=0 runs every test in one process.
TEST_WORKERS ?= 2
ifeq ($(filter-out 0,$(TEST_WORKERS)),)
PYTEST_WORKERS :=
else
PYTEST_WORKERS := -n $(TEST_WORKERS) --dist loadgroup
endif

test: setup lint typecheck
	$(PY) -m pytest -q $(PYTEST_WORKERS)

# every test that runs in process (no sandboxed worker, no CLI subprocess, no browser: the `e2e` marker, conftest.py),
# each problem proven in process on its first grading seed (its other seeds: the `every_seed` marker)
test-fast: setup
	$(PY) -m pytest -q -m "not e2e and not every_seed" $(PYTEST_WORKERS)

# docs/batch.md's Slurm job array, run as printed on a single-node Slurm it starts and stops itself (root only; where
# it cannot run it says so in one line and exits 77); `make test` leaves it out
test-slurm: setup
	tests/slurm/run

# the harness's own code and tests; the course content (references, oracles, toys, statements) keeps its own layout
CODE = grader tests conftest.py reference/*/tests

lint: setup
	$(PY) -m ruff format --check $(CODE)
	$(PY) -m ruff check $(CODE) reference

# rewrites the files `make lint` would refuse
format: setup
	$(PY) -m ruff format $(CODE)
	$(PY) -m ruff check --fix $(CODE)

# mypy with the pydantic plugin; what it checks, and how strictly, is in pyproject.toml's [tool.mypy]
typecheck: setup
	$(PY) -m mypy

clean:
	rm -rf artifacts/*/ artifacts/*.json .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

bench: setup
	$(PY) -m grader.bench --problem $(or $(PROBLEM),glm5_offpolicy)

# `make gradescope PROBLEM=ID` builds artifacts/gradescope/ID.zip, an autograder to upload to Gradescope.
.PHONY: gradescope
gradescope: setup
	@test -n "$(PROBLEM)" || { echo "usage: make gradescope PROBLEM=<id>; problems: $(PROBLEMS)"; exit 4; }
	$(PY) -m grader gradescope-zip --problem $(PROBLEM)

# `make learner-pack PROBLEM=ID` builds artifacts/learner/ID.zip: statement, starter, toy, public cases and `check`.
.PHONY: learner-pack
learner-pack: setup
	@test -n "$(PROBLEM)" || { echo "usage: make learner-pack PROBLEM=<id>; problems: $(PROBLEMS)"; exit 4; }
	$(PY) -m grader learner-pack --problem $(PROBLEM)
