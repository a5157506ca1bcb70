#!/usr/bin/env bash
# The GPU check, one prepared script for the few minutes a GPU is lent
# (about 10 minutes in all): builds the CUDA backend for the GPU at hand
# (sm_90 on an H200), runs the conformance suite on CUDA0 and the CUDA unit
# tests (pools, buffers, copies, generation equal to the CPU's), then
# benchmarks TinyLlama-1.1B-shaped random-weight models (Q4_0, Q8_0, F16)
# with every layer on CUDA0: pp512 and tg128 tokens/s, each as a fraction of
# the ceiling measured in the same run (tg: bytes read per second against
# the device-to-device copy bandwidth; pp: against the f16 GEMM rate cuBLAS
# reaches). The short table comes last.
#
#   bench/cuda_check.sh            # everything
#   SKIP_TESTS=1 bench/cuda_check.sh
#
# Knobs: ARCH (90), BUILD (build/cuda), CACHE
# (${XDG_CACHE_HOME:-~/.cache}/tessera-bench), TYPES ("q4_0 q8_0 f16"), REPS (3).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
ARCH="${ARCH:-90}"
BUILD="${BUILD:-$here/build/cuda}"
CACHE="${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera-bench}"
TYPES="${TYPES:-q4_0 q8_0 f16}"
REPS="${REPS:-3}"
jobs="$(nproc)"
t0=$(date +%s)
stage() { echo; echo "=== $1 ($(( $(date +%s) - t0 )) s) ==="; }

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

stage "build (sm_$ARCH)"
cmake -S "$here" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON \
  -DTESSERA_CUDA_ARCHITECTURES="$ARCH" >/dev/null
cmake --build "$BUILD" -j "$jobs" --target tessera conformance_test cuda_test
tessera="$BUILD/bin/tessera"
"$tessera" devices | sed -n '1,8p'

if [[ "${SKIP_TESTS:-0}" != 1 ]]; then
  stage "conformance suite on CUDA0"
  "$BUILD/tests/conformance_test" --gtest_filter='*CUDA0*' --gtest_brief=1 2>&1 | tail -25 || true
  stage "CUDA unit tests"
  "$BUILD/tests/cuda_test" --gtest_brief=1 2>&1 | tail -25 || true
fi

vocab="$here/tests/fixtures/tokenizer/ggml-vocab-llama-spm.gguf"
mkdir -p "$CACHE"
results="$(mktemp)"
for type in $TYPES; do
  model="$CACHE/tinyllama-1.1b-$type.gguf"
  if [[ ! -f "$model" ]]; then
    stage "synthesizing $model"
    "$tessera" synth --shape tinyllama-1.1b --type "$type" --vocab "$vocab" -o "$model" >&2
  fi
  stage "where the graph runs ($type)"
  TESSERA_SCHED_DEBUG=1 "$tessera" run -m "$model" -ngl 99 --device CUDA0 -p "Hello" -n 2 \
    --temp 0 2>&1 | grep -E 'splits|split [0-9]' | head -6 || true
  stage "bench $type"
  "$tessera" bench -m "$model" -ngl 99 --device CUDA0 -p 512 -n 128 -r "$REPS" -o json \
    | tee -a "$results"
done

stage "summary"
python3 - "$results" <<'PY'
import json, sys
rows, text, at = [], open(sys.argv[1]).read(), 0
dec = json.JSONDecoder()
while True:
    while at < len(text) and text[at].isspace():
        at += 1
    if at >= len(text):
        break
    data, at = dec.raw_decode(text, at)
    rows += data if isinstance(data, list) else [data]
print(f"{'model':34} {'test':8} {'t/s':>10} {'reached':>12} {'ceiling':>12} {'fraction':>9}")
for r in rows:
    test = f"pp{r['n_prompt']}" if r['n_prompt'] else f"tg{r['n_gen']}"
    unit = r.get('ceiling', '')
    print(f"{r.get('model_filename', r.get('model_type', '?'))[-34:]:34} {test:8} {r['avg_ts']:10.1f} "
          f"{r.get('reached_value', 0):12.1f} {r.get('ceiling_value', 0):12.1f} "
          f"{r.get('ceiling_fraction', 0):9.2f}  {unit}")
PY
