#!/usr/bin/env bash
# llama.cpp's pp512 / tg128 on this machine, beside bench/run.sh's table: the
# same synthesized models (run bench/run.sh first, or set CACHE), the same
# method (one warm-up, REPS runs, mean ± sd, random token ids, tg after
# DEPTH tokens in the cache). llama.cpp is node-llama-cpp's prebuilt CPU
# build from the npm registry (it picks the variant for this CPU: AVX2,
# AVX-512, AMX...), fetched once into the cache; bench/llamacpp_bench.c
# drives it through libllama's C API. Needs npm and a C compiler.
#
#   bench/llamacpp.sh            # Q4_0 Q8_0 F16 and the K / IQ4 mixes, threads 1,2, depths 0,2048
#
# Knobs (environment): SHAPE, LAYERS, TYPES, THREADS, DEPTHS, REPS, CACHE as run.sh;
# PARALLEL (1): sequences generating together in tg, e.g. 1,4,16 (bench/run.sh's
# PARALLEL, `tessera bench --parallel`; pp is the same for each);
# NLC_VERSION (3.22.1); VARIANT (below); SHM=0 to time llama.cpp on the file where it lies
# (its mmap then competes with the page cache, which these machines reclaim
# hard: decode can re-read weights from disk).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
SHAPE="${SHAPE:-tinyllama-1.1b}"
TYPES="${TYPES:-q4_0 q8_0 f16 q4_k_m q5_k_m q6_k iq4_xs q3_k_m}"
THREADS="${THREADS:-1,2}"
DEPTHS="${DEPTHS:-0,2048}"
REPS="${REPS:-3}"
CACHE="${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera-bench}"
NLC_VERSION="${NLC_VERSION:-3.22.1}"
SHM="${SHM:-1}"  # 1: time llama.cpp on a copy of the file in /dev/shm (its mmap stays resident)
# VARIANT: force one of llama.cpp's CPU builds, to set it beside a tessera
# tier forced with TESSERA_CPU_ISA: zen4 (AVX-512 VNNI / BF16, no AMX: the
# avx512 tier), haswell (AVX2: the avx2 tier). Default: llama.cpp's own pick.
VARIANT="${VARIANT:-}"
trap 'rm -f "/dev/shm/tessera-llamacpp-$$.gguf"' EXIT

source "$here/bench/llamacpp_fetch.sh"
exe="$(llamacpp_driver llamacpp_bench)"

backend_dir="$bins"
if [[ -n "$VARIANT" ]]; then
  so="$bins/libggml-cpu-$VARIANT.so"
  if [[ ! -f "$so" ]]; then
    echo "bench/llamacpp.sh: VARIANT=$VARIANT: no $so; there are:" \
      $(ls "$bins" | sed -n 's/^libggml-cpu-\(.*\)\.so$/\1/p') >&2
    exit 1
  fi
  backend_dir="$lib/variant-$VARIANT"  # a folder with that one CPU backend, for ggml_backend_load_all_from_path
  mkdir -p "$backend_dir"
  ln -sf "$so" "$backend_dir/"
fi

echo "# llama.cpp (node-llama-cpp $NLC_VERSION prebuilt) — $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) logical CPUs"
echo
PARALLEL="${PARALLEL:-1}"
echo "| model | threads | depth | sequences | pp512 t/s | tg128 t/s (all sequences) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for type in $TYPES; do
  model="$CACHE/$SHAPE${LAYERS:+-L$LAYERS}-$type.gguf"
  if [[ ! -f "$model" ]]; then
    echo "bench/llamacpp.sh: $model not found; run bench/run.sh first" >&2
    exit 1
  fi
  # llama.cpp maps the file; on tmpfs its pages are memory that the page
  # cache cannot drop mid-run (tessera copies weights to anonymous memory).
  timed="$model"
  if [[ "$SHM" == 1 ]]; then
    timed="/dev/shm/tessera-llamacpp-$$.gguf"
    cp "$model" "$timed"
  fi
  for t in ${THREADS//,/ }; do
    for d in ${DEPTHS//,/ }; do
      for np in ${PARALLEL//,/ }; do
        row="$("$exe" "$timed" "$t" "$d" "$REPS" "$backend_dir" "$np" 2>"$lib/last.log")" || {
          [[ "$timed" == "$model" ]] || rm -f "$timed"
          echo "bench/llamacpp.sh: llama.cpp failed on $model (see $lib/last.log)" >&2
          exit 1
        }
        IFS=$'\t' read -r _ _ ppm pps tgm tgs <<<"$row"
        echo "| $SHAPE${LAYERS:+ L$LAYERS} $type | $t | $d | $np | $ppm ± $pps | $tgm ± $tgs |"
      done
    done
  done
  [[ "$timed" == "$model" ]] || rm -f "$timed"
  backend="$(grep -m1 -o 'loaded CPU backend from .*' "$lib/last.log" | sed 's|.*/||' || true)"
  echo "<!-- $type: llama.cpp's CPU variant: ${backend:-?} -->"
done
