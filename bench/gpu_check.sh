#!/usr/bin/env bash
# The GPU check, staged by bench/cuda_stage.sh as gpu-check/check.sh: one log
# for the few minutes a GPU is lent. Runs from its own folder with its own
# libraries and data; needs nothing installed but the NVIDIA driver (and the
# CUDA toolkit's cuBLAS, which it reports on). Without a GPU every GPU step
# prints why it skips, and the script still exits 0.
#
# In order: the GPU and cuBLAS; cuda_test; the conformance suite on CUDA0;
# perplexity CPU vs GPU at -b 1, 8 and 512 on TinyLlama-shaped Q4_0, Q8_0
# and Q4_K files (agreement: see that step); 2-block MoE files (gpt-oss
# MXFP4, qwen3moe Q8_0 / Q4_K_M) CPU vs GPU and with --n-cpu-moe; tessera bench -ngl 99 pp512 / tg128 at
# depth 0 and 2048 on those and a llama2-7b-shaped Q4_0; tg with CUDA graphs
# off; per-kernel times when nsys is there.
#
# Every step runs under `timeout` (STEP_S, 150 s) so that one hang cannot
# spend the whole lease.
#
# Knobs: MODELS (where synthesized models go: $HOME/.cache/tessera-gpu),
# SKIP_7B=1, REPS (3), STEP_S (150), LOGS (where the tests' whole output is
# kept: $MODELS).
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TESSERA_MODELS_DIR="$here/models" TESSERA_FIXTURES_DIR="$here/fixtures"
MODELS="${MODELS:-${HOME:-/tmp}/.cache/tessera-gpu}"
REPS="${REPS:-3}"
STEP_S="${STEP_S:-150}"
LOGS="${LOGS:-$MODELS}"
mkdir -p "$LOGS"
T() { timeout -k 5 "$STEP_S" "$@"; local rc=$?; (( rc == 124 || rc == 137 )) && echo "TIMEOUT after $STEP_S s: $*"; return $rc; }
tessera="$here/bin/tessera"
t0=$(date +%s)
stage() { echo; echo "=== $1 ($(( $(date +%s) - t0 )) s) ==="; }
skip() { echo "SKIP: $1"; }

stage "machine"
# cuBLAS is opened at run time; put the toolkit's (or a Python wheel's) folder
# on the loader's path when the system's cache lacks it.
cublas_dir=""
if ! ldconfig -p 2>/dev/null | grep -q libcublas.so; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda*/targets/x86_64-linux/lib \
           $(python3 -c 'import nvidia.cublas as c; print(*[p + "/lib" for p in c.__path__])' 2>/dev/null); do
    if compgen -G "$d/libcublas.so.*" >/dev/null; then
      export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
      cublas_dir="$d"
      break
    fi
  done
fi
if ldconfig -p 2>/dev/null | grep -q libcublas.so || [[ -n "$cublas_dir" ]]; then
  echo "cuBLAS: found${cublas_dir:+ in $cublas_dir}"
else
  echo "cuBLAS: NOT found (prefill GEMMs fall back; install the CUDA toolkit's libcublas)"
fi
echo "commit $(cat "$here/COMMIT" 2>/dev/null || echo '?'), $(nproc) CPUs, $(uname -r)"
gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  gpu=1
else
  skip "no GPU here (nvidia-smi missing or it finds no device): every GPU step below skips"
fi
"$tessera" devices || { echo "FAIL: tessera does not start here (libraries?)"; ldd "$tessera" | grep "not found"; exit 1; }
if "$tessera" devices --json 2>/dev/null | grep -q '"CUDA0"'; then
  gpu=1
else
  [[ $gpu == 1 ]] && echo "FAIL: a GPU is here but tessera found no CUDA device (see 'tessera devices' above)"
  gpu=0
fi

stage "cuda_test"
if [[ $gpu == 1 ]]; then T "$here/bin/cuda_test" --gtest_brief=1 2>&1 | tee "$LOGS/cuda_test.log" | tail -40; else skip "cuda_test: no GPU"; fi

stage "conformance suite on CUDA0"
if [[ $gpu == 1 ]]; then
  T "$here/bin/conformance_test" --gtest_filter='*CUDA0*' --gtest_brief=1 2>&1 | tee "$LOGS/conformance.log" | tail -60
else
  skip "conformance on CUDA0: no GPU"
fi

stage "models"
if [[ $gpu == 0 ]]; then
  skip "models: no GPU to run them on"
  stage "done"
  exit 0
fi
mkdir -p "$MODELS"
vocab="$here/fixtures/tokenizer/ggml-vocab-llama-spm.gguf"
make_model() {  # shape type file
  [[ -f "$3" ]] && return 0
  T "$tessera" synth --shape "$1" --type "$2" --vocab "$vocab" -o "$3" 2>&1 | grep -E "^wrote|rror"
  [[ -f "$3" ]]
}
files=()
for type in q4_0 q8_0; do
  f="$MODELS/tinyllama-$type.gguf"
  make_model tinyllama-1.1b "$type" "$f" && files+=("$f")
done
f16="$MODELS/tinyllama-f16.gguf"
q4k="$MODELS/tinyllama-q4_k_m.gguf"
if [[ ! -f "$q4k" ]] && make_model tinyllama-1.1b f16 "$f16" &&
   T "$tessera" quantize "$f16" "$q4k" Q4_K_M "$(nproc)" >/dev/null 2>&1; then
  :
fi
if [[ -f "$q4k" ]]; then files+=("$q4k"); else skip "Q4_K_M: tessera quantize cannot make it in this build"; fi
ls -la "${files[@]}"

stage "perplexity, CPU vs GPU"
# These files have random weights (perplexity ~5e4), where the CPU's own result
# moves by up to ~3e-3 between batch sizes (GEMV and GEMM paths round the
# activations differently), so a GPU value counts as agreeing when it is within
# 1e-3 of the CPU's at the same batch size or within twice the CPU's own spread.
ppl() { T "$tessera" perplexity -m "$1" -f "$here/data/story.txt" -c 128 -b "$2" -ngl "$3" 2>&1 |
        grep -oE 'PPL = [0-9.]+' | tail -1 | cut -d' ' -f3; }
if [[ $gpu == 1 ]]; then
  for f in "${files[@]}"; do
    declare -A cpu_at=() gpu_at=()
    for b in 1 8 512; do cpu_at[$b]=$(ppl "$f" "$b" 0); gpu_at[$b]=$(ppl "$f" "$b" 99); done
    python3 - "$(basename "$f")" "${cpu_at[1]:-nan}" "${cpu_at[8]:-nan}" "${cpu_at[512]:-nan}" \
        "${gpu_at[1]:-nan}" "${gpu_at[8]:-nan}" "${gpu_at[512]:-nan}" <<'PY'
import math, sys
name, *v = sys.argv[1:]
cpu, gpu = [float(x) for x in v[:3]], [float(x) for x in v[3:]]
spread = (max(cpu) - min(cpu)) / min(cpu)
for b, c, g in zip((1, 8, 512), cpu, gpu):
    rel = abs(g - c) / c
    ok = rel <= max(1e-3, 2 * spread)
    print(f"{name} -b {b}: cpu {c:.4f} gpu {g:.4f} rel {rel:.1e} (cpu spread {spread:.1e}) {'ok' if ok else 'DIFFERS'}")
PY
  done
else
  skip "perplexity on the GPU: no GPU"
fi

stage "perplexity with a quantized KV cache (-ctk/-ctv q8_0, q4_0), CPU vs GPU"
# The cache is written on the GPU with the CPU's quantizer arithmetic; the two
# agree when the GPU is within 1e-3 of the CPU, or within twice what the cache
# type itself moves the CPU's result from an f16 cache (the CPU's quantized
# attention rounds Q too, the GPU's reads K and V as floats).
if [[ $gpu == 1 ]]; then
  f="${files[0]}"
  f16=$(ppl "$f" 8 0)
  for ct in q8_0 q4_0; do
    kv() { T "$tessera" perplexity -m "$f" -f "$here/data/story.txt" -c 128 -b 8 -ngl "$1" -ctk $ct -ctv $ct 2>&1 |
           grep -oE 'PPL = [0-9.]+' | tail -1 | cut -d' ' -f3; }
    cpu=$(kv 0); gpu_ppl=$(kv 99)
    python3 -c "
f,c,g=float('${f16:-nan}'),float('${cpu:-nan}'),float('${gpu_ppl:-nan}')
rel,moved=abs(g-c)/c,abs(c-f)/f
print(f'$(basename "$f") cache $ct: cpu {c:.4f} gpu {g:.4f} rel {rel:.1e} (f16 cache -> $ct moves the cpu {moved:.1e})', 'ok' if rel<=max(1e-3,2*moved) else 'DIFFERS')"
  done
else
  skip "quantized KV cache on the GPU: no GPU"
fi

stage "mixtures of experts, CPU vs GPU (2 blocks of gpt-oss-20b MXFP4, qwen3-30b-a3b Q8_0 / Q4_K_M)"
# MUL_MAT_ID (split Q4_0/Q8_0, K-quant and MXFP4 experts read in place), the
# router's ARGSORT / SUM_ROWS, ADD_ID, SWIGLU_OAI and attention sinks on the
# GPU; perplexity judged as above; then with the experts of block 0 kept in
# host memory (--n-cpu-moe 1), where the graph splits, and the speed.
moe=()
make_moe() {  # shape type file
  [[ -f "$3" ]] && return 0
  T "$tessera" synth --shape "$1" --layers 2 --type "$2" -o "$3" 2>&1 | grep -E "^wrote|rror"
  [[ -f "$3" ]]
}
make_moe gpt-oss-20b mxfp4 "$MODELS/gpt-oss-20b-L2-mxfp4.gguf" && moe+=("$MODELS/gpt-oss-20b-L2-mxfp4.gguf")
make_moe qwen3-30b-a3b q8_0 "$MODELS/qwen3-30b-a3b-L2-q8_0.gguf" && moe+=("$MODELS/qwen3-30b-a3b-L2-q8_0.gguf")
qf16="$MODELS/qwen3-30b-a3b-L2-f16.gguf" qk="$MODELS/qwen3-30b-a3b-L2-q4_k_m.gguf"
if [[ -f "$qk" ]] || { make_moe qwen3-30b-a3b f16 "$qf16" &&
                       T "$tessera" quantize "$qf16" "$qk" Q4_K_M "$(nproc)" >/dev/null 2>&1; }; then
  moe+=("$qk")
fi
for f in "${moe[@]}"; do
  declare -A cpu_at=() gpu_at=()
  for b in 1 128; do cpu_at[$b]=$(ppl "$f" "$b" 0); gpu_at[$b]=$(ppl "$f" "$b" 99); done
  split=$(T "$tessera" perplexity -m "$f" -f "$here/data/story.txt" -c 128 -b 128 -ngl 99 --n-cpu-moe 1 2>&1 |
          grep -oE 'PPL = [0-9.]+' | tail -1 | cut -d' ' -f3)
  python3 - "$(basename "$f")" "${cpu_at[1]:-nan}" "${cpu_at[128]:-nan}" "${gpu_at[1]:-nan}" \
      "${gpu_at[128]:-nan}" "${split:-nan}" <<'PY'
import sys
name, *v = sys.argv[1:]
c1, c128, g1, g128, split = (float(x) for x in v)
spread = abs(c1 - c128) / min(c1, c128)
for label, c, g in (("-b 1", c1, g1), ("-b 128", c128, g128), ("-b 128 --n-cpu-moe 1", c128, split)):
    rel = abs(g - c) / c
    print(f"{name} {label}: cpu {c:.4f} gpu {g:.4f} rel {rel:.1e} (cpu spread {spread:.1e})",
          "ok" if rel <= max(1e-3, 2 * spread) else "DIFFERS")
PY
  TESSERA_SCHED_DEBUG=1 T "$tessera" run -m "$f" -ngl 99 -p Hello -n 2 --temp 0 2>&1 | grep -iE "split|placement" | head -4
  T "$tessera" bench -m "$f" -ngl 99 -p 512 -n 128 -r "$REPS" 2>&1 | tail -3
done

stage "where the graph runs (-ngl 99: one split means no matmul left on the CPU)"
if [[ $gpu == 1 ]]; then
  for f in "${files[@]}"; do
    echo "$(basename "$f"):"
    TESSERA_SCHED_DEBUG=1 T "$tessera" run -m "$f" -ngl 99 -p Hello -n 2 --temp 0 2>&1 | grep -iE "split|placement" | head -8
  done
else
  skip "placement on the GPU: no GPU"
fi

stage "tessera bench -ngl 99 (pp512, tg128; depth 0 and 2048)"
if [[ $gpu == 1 ]]; then
  if [[ "${SKIP_7B:-0}" != 1 ]]; then
    f="$MODELS/llama2-7b-q4_0.gguf"
    make_model llama2-7b q4_0 "$f" && files+=("$f")
  fi
  for f in "${files[@]}"; do
    T "$tessera" bench -m "$f" -ngl 99 -p 512 -n 128 -d 0,2048 -r "$REPS" 2>&1 | tail -6
  done
  stage "tg128 with CUDA graphs off"
  for f in "${files[@]}"; do
    TESSERA_CUDA_GRAPHS=0 T "$tessera" bench -m "$f" -ngl 99 -p 0 -n 128 -r "$REPS" 2>&1 | tail -3
  done
else
  skip "benchmarks on the GPU: no GPU"
fi

stage "per-kernel time"
if [[ $gpu == 1 ]] && command -v nsys >/dev/null; then
  nsys profile -o "$MODELS/tg" --force-overwrite true --stats=true \
    "$tessera" run -m "${files[0]}" -ngl 99 -p Hello -n 64 --temp 0 2>&1 | grep -A25 "cuda_gpu_kern_sum" | head -30
elif [[ $gpu == 1 ]]; then
  skip "per-kernel time: no nsys on this machine"
else
  skip "per-kernel time: no GPU"
fi

stage "done"
