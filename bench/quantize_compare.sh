#!/usr/bin/env bash
# tessera quantize against llama.cpp's llama_model_quantize on the same F16
# model: per mix, how many tensors come out byte-identical (same type, same
# bytes), and for the others the name, both types and the largest difference
# after dequantization. llama.cpp is node-llama-cpp's prebuilt libllama from
# npm (as bench/llamacpp.sh fetches it); bench/quantize_compare.c drives it.
# Each mix runs twice: without and with an importance matrix (a made-up one
# in llama-imatrix's GGUF layout, written by quantize_compare.c).
#
#   bench/quantize_compare.sh            # the mixes below on a llama-100m F16
#   bench/quantize_compare.sh --hashes   # expected data of tests/core/quants_ggml_test.cpp
#
# The MoE shapes (SHAPE=qwen3moe-tiny, gpt-oss-tiny, mixtral-tiny,
# qwen2moe-tiny) take MXFP4_MOE:38 too. "whole file" is cmp of the two files
# (keys, tensor order, shapes and data); with an imatrix it differs by the
# quantize.imatrix.* keys, which llama-quantize's CLI adds and the library call
# made here does not.
#
# Knobs (environment): SHAPE (llama-100m), MIXES, THREADS (2), BUILD (the
# build folder with bin/tessera, default build/release), IMATRIX (1; 0 skips
# the imatrix runs), CACHE, NLC_VERSION.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
SHAPE="${SHAPE:-llama-100m}"
MIXES="${MIXES:-Q4_K_M:15 Q5_K_M:17 Q6_K:18 Q3_K_M:12 Q2_K:10 IQ4_NL:25 IQ4_XS:30}"
THREADS="${THREADS:-2}"
BUILD="${BUILD:-$here/build/release}"
CACHE="${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera-bench}"
NLC_VERSION="${NLC_VERSION:-3.22.1}"
IMATRIX="${IMATRIX:-1}"

source "$here/bench/llamacpp_fetch.sh"
# -ffp-contract=off: the test rows must be the same floats as in the C++ test.
exe="$(llamacpp_driver quantize_compare -ffp-contract=off)"

if [[ "${1:-}" == "--hashes" ]]; then
  exec "$exe" hashes
fi

tessera="$BUILD/bin/tessera"
[[ -x "$tessera" ]] || { echo "bench/quantize_compare.sh: $tessera not found; set BUILD" >&2; exit 1; }
work="$CACHE/quantize-compare"
mkdir -p "$work"
src="$work/$SHAPE-f16.gguf"
[[ -f "$src" ]] || "$tessera" synth --shape "$SHAPE" --type f16 -o "$src" >/dev/null 2>&1

imatrix="$work/$SHAPE-imatrix.gguf"
[[ -f "$imatrix" ]] || "$exe" imatrix "$src" "$imatrix"

echo "# tessera quantize vs llama.cpp (node-llama-cpp $NLC_VERSION) on $SHAPE F16 — $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo
echo "| mix | ftype | imatrix | byte-identical tensors | whole file | tessera s | llama.cpp s |"
echo "| --- | ---: | --- | ---: | --- | ---: | ---: |"
details=""
runs="plain"
[[ "$IMATRIX" == 1 ]] && runs="plain imatrix"
for entry in $MIXES; do
  mix="${entry%%:*}" ftype="${entry##*:}"
  for run in $runs; do
    ours="$work/$SHAPE-$mix-tessera.gguf" theirs="$work/$SHAPE-$mix-llamacpp.gguf"
    our_flags=() their_args=()
    if [[ "$run" == imatrix ]]; then our_flags=(--imatrix "$imatrix"); their_args=("$imatrix"); fi
    t0=$(date +%s.%N)
    "$tessera" quantize "${our_flags[@]}" "$src" "$ours" "$mix" "$THREADS" 2>"$work/tessera.log" ||
      { echo "tessera quantize $mix failed (see $work/tessera.log)" >&2; exit 1; }
    t1=$(date +%s.%N)
    "$exe" quantize "$src" "$theirs" "$ftype" "${their_args[@]}" >"$work/llamacpp.log" 2>&1 ||
      { echo "llama.cpp quantize $mix failed (see $work/llamacpp.log)" >&2; exit 1; }
    t2=$(date +%s.%N)
    out="$("$exe" diff "$ours" "$theirs")"
    summary="$(tail -1 <<<"$out")"
    same_file=differs
    cmp -s "$ours" "$theirs" && same_file=identical
    echo "| $mix | $ftype | $([[ $run == imatrix ]] && echo yes || echo no) | ${summary#identical } | $same_file |" \
      "$(echo "$t1 - $t0" | bc | xargs printf %.1f) | $(echo "$t2 - $t1" | bc | xargs printf %.1f) |"
    if [[ "$(wc -l <<<"$out")" -gt 1 ]]; then details+="$mix ($run):"$'\n'"$(head -n -1 <<<"$out")"$'\n'; fi
    rm -f "$ours" "$theirs"
  done
done
if [[ -n "$details" ]]; then
  echo
  echo "Tensors that differ:"
  echo "$details"
fi
