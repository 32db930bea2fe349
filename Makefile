# PaperLeet: `make grade` grades every submission; `make test` runs the harness's own tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROBLEMS := $(notdir $(patsubst %/problem.toml,%,$(wildcard problems/*/problem.toml)))
JOBS ?= 0

.PHONY: setup grade test previews validate bench lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

previews: setup
	for p in $(PROBLEMS); do $(PY) -m grader previews --problem $$p || exit $$?; done

grade: previews
	for p in $(PROBLEMS); do $(PY) -m grader grade-all --problem $$p --jobs $(JOBS) || exit $$?; done

validate: setup
	for p in $(PROBLEMS); do $(PY) -m grader validate --problem $$p --jobs $(JOBS) || exit $$?; done

test: setup
	$(PY) -m pytest -q

lint: setup
	$(PY) -m ruff check grader tests

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
