#!/usr/bin/env bash
# The prepared GPU run of issue 27 (docs/benchmarks.md, "The GPU check"), from a fresh clone:
#   bash benchmarks/gpu_check.sh                    # on a machine with one NVIDIA GPU (<= 8 minutes)
#   bash benchmarks/gpu_check.sh --device cpu       # the CI-sized dry run on a CPU (tiny sizes, ~1 minute)
# Output: $OUT when set, else ./gpu-check-output (or --out DIR): gpu_check.json, gpu_check.md, logs/.
# When this python's torch already sees CUDA (the lent machine: no network, everything installed), it runs
# from the source tree (PYTHONPATH=src); otherwise it installs a CUDA torch into .venv-gpu with pip
# (TORCH_SPEC, default "torch": PyPI's Linux wheels are CUDA builds; TORCH_INDEX_URL to pick another;
# GPU_CHECK_INSTALL=0 never installs).
# Extra arguments go to benchmarks/gpu_check.py (--stages, --total-s, --compile-backend).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
DEVICE=cuda
OUT_DIR="${OUT:-$ROOT/gpu-check-output}"
TOTAL_S="${GPU_CHECK_TOTAL_S:-480}"   # the whole script, installing included
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --device=*) DEVICE="${1#--device=}"; shift ;;
    --out) OUT_DIR="$2"; shift 2 ;;
    --out=*) OUT_DIR="${1#--out=}"; shift ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
mkdir -p "$OUT_DIR/logs" || exit 2
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
PY="${PYTHON:-python3}"
# The dry run needs only a CPU torch: the repository's .venv (make test / make demo made it) when PYTHON is unset.
[ "$DEVICE" = cpu ] && [ -z "${PYTHON:-}" ] && [ -x "$ROOT/.venv/bin/python" ] && PY="$ROOT/.venv/bin/python"
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false MPLBACKEND=Agg
export PIP_NO_INPUT=1 PYTHONUNBUFFERED=1
STARTED=$SECONDS
say() { echo "[gpu_check.sh] $(date -u +%H:%M:%S) $*"; }

# Whatever happens below, a summary exists at the end.
fallback_summary() {
  local rc=$?
  if [ ! -s "$OUT_DIR/gpu_check.json" ]; then
    say "no summary from gpu_check.py (exit $rc): writing a minimal one"
    printf '{"format": 1, "device": "%s", "error": "gpu_check.py wrote no summary (exit %s); see logs/setup.log", "stages": {}}\n' \
      "$DEVICE" "$rc" > "$OUT_DIR/gpu_check.json"
    printf '# glassformer GPU check\n\nThe run failed before any stage (exit %s): see logs/setup.log.\n' "$rc" \
      > "$OUT_DIR/gpu_check.md"
  fi
}
trap fallback_summary EXIT

command -v "$PY" >/dev/null 2>&1 || { say "no $PY" | tee "$OUT_DIR/logs/setup.log"; exit 2; }
{
  say "repository $ROOT at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'); output $OUT_DIR; device $DEVICE"
  say "$(uname -a)"
  if command -v nvidia-smi >/dev/null 2>&1; then
    timeout 20 nvidia-smi || say "nvidia-smi failed"
  else
    say "nvidia-smi not found"
  fi
  "$PY" --version
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda build", torch.version.cuda, "cuda available", torch.cuda.is_available())' \
    || say "torch does not import with $PY"
} 2>&1 | tee "$OUT_DIR/logs/setup.log"

if [ "$DEVICE" != cpu ]; then
  if timeout 60 "$PY" -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
    say "torch sees CUDA: running from the source tree (PYTHONPATH=src), nothing installed"
  elif [ "${GPU_CHECK_INSTALL:-1}" = 0 ]; then
    say "torch does not see CUDA and GPU_CHECK_INSTALL=0: nothing installed; the stages will say what fails"
  else
    say "torch with CUDA not found for $PY: installing into .venv-gpu (pip)"
    INDEX=()
    [ -n "${TORCH_INDEX_URL:-}" ] && INDEX=(--index-url "$TORCH_INDEX_URL")
    if { [ -x .venv-gpu/bin/python ] || "$PY" -m venv .venv-gpu; } \
        && timeout 300 .venv-gpu/bin/python -m pip install --quiet --retries 1 --timeout 20 --upgrade pip \
        && timeout 300 .venv-gpu/bin/python -m pip install --quiet --retries 1 --timeout 20 "${INDEX[@]}" "${TORCH_SPEC:-torch}" \
        && timeout 300 .venv-gpu/bin/python -m pip install --quiet --retries 1 --timeout 20 -e '.[dev]' transformers; then
      PY="$ROOT/.venv-gpu/bin/python"
    else
      say "installing failed; the stages will say what is missing"
    fi
  fi
fi >>"$OUT_DIR/logs/setup.log" 2>&1

LEFT=$(( TOTAL_S - (SECONDS - STARTED) - 10 ))
[ "$LEFT" -lt 60 ] && LEFT=60
say "running the stages with $PY (budget ${LEFT} s)"
# gpu_check.py keeps every stage within its budget; the outer timeout is a last resort (SIGTERM writes the summary).
timeout --kill-after=10 $(( LEFT + 15 )) "$PY" "$ROOT/benchmarks/gpu_check.py" --device "$DEVICE" --out "$OUT_DIR" \
  --total-s "$LEFT" "${ARGS[@]+"${ARGS[@]}"}"
rc=$?
say "done in $(( SECONDS - STARTED )) s (exit $rc); summary: $OUT_DIR/gpu_check.md"
[ -s "$OUT_DIR/gpu_check.md" ] && cat "$OUT_DIR/gpu_check.md"
exit $rc
