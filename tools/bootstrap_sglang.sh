#!/usr/bin/env bash
# Build .venv-sglang: the real SGLang in its own venv, for the engine tests (marker `engine`) and the SGLang driver
# (eagle3lib/sglang_engine). eagle3lib reaches it only by subprocess (eagle3lib/sglang_engine/env.py).
# - a CUDA host (nvidia-smi lists a GPU): the registry's SGLang, requirements/sglang-cuda.txt;
# - a CPU host: the CPU build in ../shared/engines/sglang-cpu (its README's recipe: the fork's CPU package with its
#   patches, its CPU kernels, the local torch 2.13.0+cpu). It needs Python 3.11 and a CPU with avx512_bf16 (the
#   kernels are built -march=x86-64-v4 -mavx512bf16); AMX is not needed. Elsewhere it exits 3 saying why, and the
#   engine tests skip with that reason.
# $SGLANG_CPU_DIR overrides where the CPU build lies. A second run with the stamp in place does nothing.
set -euo pipefail
PY=${PYTHON311:-python3.11}
VENV=${SGLANG_VENV:-.venv-sglang}
STAMP=$VENV/.eagle3lib-sglang-installed
if [ -n "${SGLANG_FLAVOUR:-}" ]; then
  flavour=$SGLANG_FLAVOUR
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  flavour=cuda
else
  flavour=cpu
fi
if [ -f "$STAMP" ] && "$VENV/bin/python" -c "import sglang" >/dev/null 2>&1; then
  echo "bootstrap_sglang: $VENV already has SGLang ($(cat "$STAMP"))"
  exit 0
fi
if [ "$flavour" = cpu ]; then
  S=${SGLANG_CPU_DIR:-}
  if [ -z "$S" ]; then   # the shared folder beside this checkout or above it (a CI clone), else the workplace's
    d=$(pwd)
    while [ "$d" != / ] && [ ! -d "$d/shared/engines/sglang-cpu" ]; do d=$(dirname "$d"); done
    if [ -d "$d/shared/engines/sglang-cpu" ]; then S=$d/shared/engines/sglang-cpu
    elif [ -d ../shared/engines/sglang-cpu ]; then S=../shared/engines/sglang-cpu
    else S=/work/shared/engines/sglang-cpu; fi
  fi
  [ -d "$S" ] || { echo "bootstrap_sglang: no CPU build at $S (set SGLANG_CPU_DIR)" >&2; exit 3; }
  S=$(cd "$S" && pwd)
  grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null \
    || { echo "bootstrap_sglang: this CPU has no avx512_bf16; SGLang's CPU kernels cannot load here" >&2; exit 3; }
  command -v "$PY" >/dev/null 2>&1 || { echo "bootstrap_sglang: no $PY (the CPU kernels are built for Python 3.11)" >&2; exit 3; }
  case "$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" in
    3.11) ;; *) echo "bootstrap_sglang: $PY is not Python 3.11 (the CPU kernels are cp311)" >&2; exit 3 ;;
  esac
fi
rm -f "$STAMP"
# a failed install leaves no half-built venv behind (eagle3lib would take its python for a working SGLang)
trap 'status=$?; if [ "$status" != 0 ] && [ ! -f "$STAMP" ]; then rm -rf "$VENV"; fi' EXIT
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if [ "$flavour" = cpu ]; then
  echo "bootstrap_sglang: installing the CPU build from $S into $VENV"
  "$VENV/bin/python" -m pip install -q torch==2.13.0
  "$VENV/bin/python" -m pip install -q -c "$S/constraints.txt" -r "$S/requirements.txt"
  "$VENV/bin/python" -m pip install -q --no-deps "$S"/sglang_cpu-*.whl "$S"/sglang_kernel_cpu-*.whl
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # the torchvision fix only: the SGLang fixes are already in the wheel
  if ! (cd "$site" && sed -n '/^--- torchvision/,$p' "$S/patches.diff" | patch -p0 -s -N --dry-run >/dev/null 2>&1); then
    echo "bootstrap_sglang: the torchvision patch is already applied or does not apply; leaving torchvision as is"
  else
    (cd "$site" && sed -n '/^--- torchvision/,$p' "$S/patches.diff" | patch -p0 -s -N)
  fi
  got=$("$VENV/bin/python" -c "import sglang, sgl_kernel; print(sglang.__version__)" 2>/dev/null | tail -1) || got=""
else
  echo "bootstrap_sglang: installing $(grep -v '^#' requirements/sglang-cuda.txt | xargs) into $VENV (cuda)"
  "$VENV/bin/python" -m pip install -q -r requirements/sglang-cuda.txt
  got=$("$VENV/bin/python" -c "import sglang; print(sglang.__version__)" 2>/dev/null | tail -1) || got=""
fi
[ -n "$got" ] || { echo "bootstrap_sglang: import sglang in $VENV failed" >&2; exit 1; }
echo "$flavour $got" > "$STAMP"
echo "bootstrap_sglang: SGLang $got ($flavour) in $VENV"
