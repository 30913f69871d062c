#!/usr/bin/env bash
# Set up .venv for eagle3lib on a machine that has only Python 3.10+ and pip.
# - keeps a torch that the base interpreter already has (a GPU box: CUDA build);
# - otherwise installs $TORCH_SPEC (default torch==2.13.0, the CPU wheel on these machines;
#   set PIP_INDEX_URL / TORCH_SPEC yourself elsewhere to get a CPU build);
# - then installs eagle3lib editable with what the workbook needs (and JupyterLab); torch is already satisfied,
#   so the resolver never pulls a multi-GB CUDA build. `make report` / `make setup` run this.
# `bootstrap.sh --test` (what `make test` / `make test-all` run, after the above) adds the test-only peers: pytest,
# hypothesis, Playwright (the `dev` extra), and the parity peers SpecForge and speculators (--no-deps, their import
# chains in the `parity` extra). Those peers pin sglang and other versions they do not need here: pip's resolver
# would print its "dependency conflicts" for them, which are expected, so the installs say --no-warn-conflicts.
set -euo pipefail
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

if [ ! -x "$VENV/bin/python" ]; then
  if "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "bootstrap: keeping the base interpreter's torch $("$PY" -c 'import torch; print(torch.__version__)')"
    "$PY" -m venv --system-site-packages "$VENV"
  else
    "$PY" -m venv "$VENV"
  fi
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "bootstrap: installing $TORCH_SPEC"
  "$VENV/bin/python" -m pip install -q "$TORCH_SPEC"
fi
if [ "${1:-}" = "--test" ]; then
  # The parity peers (tests/model/test_parity_*.py, benchmarks/bench_peers.py): the real SpecForge and speculators,
  # without their dependency pins (sglang, a CUDA torch, an older transformers). PARITY=0 skips them; their tests
  # then skip with the reason.
  PEERS=${PEERS:-specforge==0.2.0 speculators==0.9.0}
  EXTRAS=dev
  [ "${PARITY:-1}" != "0" ] && EXTRAS=dev,parity
  "$VENV/bin/python" -m pip install -q --no-warn-conflicts -e ".[$EXTRAS]"
  if [ "${PARITY:-1}" != "0" ]; then
    # shellcheck disable=SC2086
    "$VENV/bin/python" -m pip install -q --no-deps $PEERS
  fi
  echo "bootstrap: test peers installed (.[$EXTRAS]$([ "${PARITY:-1}" != "0" ] && echo "; without their pins: $PEERS"))"
  touch "$VENV/.eagle3lib-test-installed"
  exit 0
fi
# lab: JupyterLab, as the README runs it (and tests/test_lab_e2e.py in a real browser)
"$VENV/bin/python" -m pip install -q --no-warn-conflicts -e ".[lab]"
"$VENV/bin/python" - <<'PY'
import torch, transformers, papermill
from eagle3lib.report.runner import ensure_kernel
ensure_kernel()  # the notebooks' "python3" kernel runs this venv's Python (JupyterLab and papermill alike)
print(f"bootstrap: torch {torch.__version__} (cuda={torch.cuda.is_available()}), "
      f"transformers {transformers.__version__}, papermill {papermill.__version__}")
PY
touch "$VENV/.eagle3lib-installed"
