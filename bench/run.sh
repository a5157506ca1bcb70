#!/usr/bin/env bash
# tessera's speed table on this machine: random-weight models of a real
# shape (tessera synth, cached outside the tree), then tessera bench for each
# type at each thread count and depth, every row with its fraction of the
# ceiling measured in the same run (read bandwidth for tg, the tier's int8
# or FMA peak for pp). Weights are copied into anonymous memory at load, so
# the page cache does not matter once a model is loaded.
#
#   bench/run.sh                 # TinyLlama-1.1B shape, Q4_0 Q8_0 F16 and the K / IQ4 mixes, 1 and 2 threads, d 0 and 2048
#   SHAPE=llama-100m REPS=2 bench/run.sh
#   SHAPE=gpt-oss-20b LAYERS=8 TYPES=mxfp4 THREADS=2 DEPTHS=0 bench/run.sh   # a MoE file that fits
#
# The K and IQ4 mixes (q4_k_m, q5_k_m, q6_k, iq4_xs, q3_k_m, ...: any type
# `tessera quantize` takes) are made by `tessera quantize` from the
# synthesized F16 file, with llama-quantize's per-tensor rules.
#
# mxfp4 is synthesized directly, as MXFP4_MOE lays it out (experts MXFP4,
# the rest Q8_0).
#
# Knobs (environment): SHAPE, LAYERS (blocks to synthesize instead of the shape's; files
# are then named SHAPE-LN-TYPE), TYPES ("q4_0 q8_0 f16 q4_k_m q5_k_m q6_k iq4_xs q3_k_m"), THREADS (1,2),
# DEPTHS (0,2048), PARALLEL (1; e.g. 1,4,16: sequences generating together in tg), P (512), N (128), REPS (3), BUILD (build/release),
# CACHE (${XDG_CACHE_HOME:-~/.cache}/tessera-bench), JSON=1 for JSON rows, PROFILE=1 for each test's
# step profile after its table (tessera bench --profile: op classes, GB/s against the read probe),
# WEIGHTS_CACHE (off: the synthesized files get no weights images, which would take their size
# again on disk; a directory to keep them: decode and prompt speeds are the same either way).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$here/build/release}"
SHAPE="${SHAPE:-tinyllama-1.1b}"
TYPES="${TYPES:-q4_0 q8_0 f16 q4_k_m q5_k_m q6_k iq4_xs q3_k_m}"
THREADS="${THREADS:-1,2}"
DEPTHS="${DEPTHS:-0,2048}"
P="${P:-512}"
N="${N:-128}"
REPS="${REPS:-3}"
CACHE="${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera-bench}"
tessera="$BUILD/bin/tessera"

if [[ ! -x "$tessera" ]]; then
  echo "bench/run.sh: $tessera not found; build first (make build)" >&2
  exit 1
fi
mkdir -p "$CACHE"

echo "# tessera bench/run.sh — $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) logical CPUs"
flags="$(grep -m1 '^flags' /proc/cpuinfo)"
tier=ref
[[ "$flags" == *" avx2 "* && "$flags" == *" fma "* ]] && tier=avx2
[[ "$flags" == *avx512_vnni* && "$flags" == *avx512_bf16* && "$flags" == *" gfni "* ]] && tier=avx512
[[ "$tier" == avx512 && "$flags" == *amx_int8* ]] && tier=amx
tier="${TESSERA_CPU_ISA:-$tier}"
name="$SHAPE${LAYERS:+-L$LAYERS}"
synth_layers=()
[[ -n "${LAYERS:-}" ]] && synth_layers=(--layers "$LAYERS")
echo "# tier: $tier; shape $SHAPE${LAYERS:+ ($LAYERS blocks)}; pp$P, tg$N, depths $DEPTHS, threads $THREADS, $REPS repetitions"
echo

for type in $TYPES; do
  model="$CACHE/$name-$type.gguf"
  if [[ ! -f "$model" ]]; then
    case "$type" in
      f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|mxfp4)
        echo "synthesizing $model ..." >&2
        "$tessera" synth --shape "$SHAPE" "${synth_layers[@]}" --type "$type" -o "$model" >&2 ;;
      *)
        f16="$CACHE/$name-f16.gguf"
        if [[ ! -f "$f16" ]]; then
          echo "synthesizing $f16 ..." >&2
          "$tessera" synth --shape "$SHAPE" "${synth_layers[@]}" --type f16 -o "$f16" >&2
        fi
        echo "quantizing $f16 to $type ..." >&2
        "$tessera" quantize "$f16" "$model.part" "$type" >&2
        mv "$model.part" "$model" ;;
    esac
  fi
  out=md
  [[ "${JSON:-0}" == 1 ]] && out=json
  profile=()
  [[ "${PROFILE:-0}" == 1 ]] && profile=(--profile)
  "$tessera" bench -m "$model" -p "$P" -n "$N" -d "$DEPTHS" -t "$THREADS" -r "$REPS" \
    --parallel "${PARALLEL:-1}" -o "$out" --weights-cache "${WEIGHTS_CACHE:-off}" "${profile[@]}"
  echo
done
