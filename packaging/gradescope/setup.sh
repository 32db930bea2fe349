#!/usr/bin/env bash
# Installs the PaperLeet autograder for problem @PROBLEM@ on Gradescope's Ubuntu image.
#
# Needs Python @PYTHON_VERSION@ (the version the pinned requirements were resolved for): uses $PYTHON when set,
# else python@PYTHON_VERSION@ from PATH, else installs it (apt and the deadsnakes PPA, or uv as a fallback).
# Creates a virtual environment at $VENV (default $AUTOGRADER_ROOT/venv) or reuses one that exists, installs
# the CPU build of torch @TORCH_VERSION@ unless that venv already imports it, then the pinned requirements.
# The harness itself runs from $AUTOGRADER_ROOT/source, where Gradescope unpacks this zip.
set -euo pipefail

AUTOGRADER_ROOT="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="${PAPERLEET_SOURCE:-$AUTOGRADER_ROOT/source}"
VENV="${VENV:-$AUTOGRADER_ROOT/venv}"
PYTHON_VERSION="@PYTHON_VERSION@"
TORCH_VERSION="@TORCH_VERSION@"
TORCH_INDEX="https://download.pytorch.org/whl/cpu"

has_version() {  # has_version PYTHON: true when PYTHON runs and is Python $PYTHON_VERSION
  "$1" -c "import sys; sys.exit(f'{sys.version_info[0]}.{sys.version_info[1]}' != '$PYTHON_VERSION')" 2>/dev/null
}

install_python() {
  if command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    # every command's output goes to stderr: stdout returns the interpreter's path
    apt-get update -q >&2
    apt-get install -y -q software-properties-common >&2
    if add-apt-repository -y ppa:deadsnakes/ppa >&2 && apt-get update -q >&2 \
        && apt-get install -y -q "python$PYTHON_VERSION" "python$PYTHON_VERSION-venv" >&2; then
      command -v "python$PYTHON_VERSION"
      return
    fi
  fi
  # no apt, or no deadsnakes build for this release: a standalone CPython through uv
  command -v curl >/dev/null || apt-get install -y -q curl >&2
  curl -LsSf https://astral.sh/uv/install.sh | env UV_INSTALL_DIR=/usr/local/bin sh >&2
  uv python install "$PYTHON_VERSION" >&2
  uv python find "$PYTHON_VERSION"
}

find_python() {
  if [ -n "${PYTHON:-}" ]; then
    echo "$PYTHON"
  elif command -v "python$PYTHON_VERSION" >/dev/null; then
    command -v "python$PYTHON_VERSION"
  elif command -v python3 >/dev/null && has_version python3; then
    command -v python3
  else
    install_python
  fi
}

if [ ! -x "$VENV/bin/python" ]; then
  python="$(find_python)"
  "$python" -m venv "$VENV"
fi
if ! has_version "$VENV/bin/python"; then
  echo "setup.sh: $VENV runs $("$VENV/bin/python" --version 2>&1); PaperLeet needs Python $PYTHON_VERSION" >&2
  exit 1
fi

pip() { "$VENV/bin/python" -m pip --disable-pip-version-check "$@"; }
if "$VENV/bin/python" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" \
    2>/dev/null; then
  echo "setup.sh: torch $TORCH_VERSION already installed in $VENV"
else
  pip install --quiet "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX"
fi
pip install --quiet -r "$SOURCE/requirements.txt"

# fail here, at build time, rather than on the first submission
cd "$SOURCE"
PAPERLEET_ROOT="$SOURCE" "$VENV/bin/python" -c "from grader.model.problem import Problem; Problem('@PROBLEM@').reference"
echo "setup.sh: PaperLeet autograder for @PROBLEM@ installed in $VENV"
