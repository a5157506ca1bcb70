#!/usr/bin/env bash
# Makes the ids of a tokenizer fixture (tests/fixtures/tokenizer): llama.cpp's
# tokenization (node-llama-cpp's prebuilt libllama, bench/tok_fixture.c) of
# each case of the shared test-tokenizer-0 inputs, on a model with the
# vocabulary VOCAB (a bert-tiny file from `tessera synth`, since llama.cpp
# loads whole models).
#
#   bench/tok_fixture.sh NAME VOCAB [INP]
# writes tests/fixtures/tokenizer/ggml-vocab-NAME.gguf (a copy of VOCAB) and
# its .inp (INP, default bert-bge's 46 cases) and .out. Knobs (environment):
# BUILD (default build/release), CACHE, NLC_VERSION.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
[[ $# -eq 2 || $# -eq 3 ]] || { echo "usage: $0 NAME VOCAB [INP]" >&2; exit 2; }
name="$1" vocab="$2"
BUILD="${BUILD:-$here/build/release}"
CACHE="${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera-bench}"
NLC_VERSION="${NLC_VERSION:-3.22.1}"

source "$here/bench/llamacpp_fetch.sh"
exe="$(llamacpp_driver tok_fixture)"

dir="$here/tests/fixtures/tokenizer"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$BUILD/bin/tessera" synth --shape bert-tiny --type f16 --vocab "$vocab" -o "$work/model.gguf"
[[ "$vocab" -ef "$dir/ggml-vocab-$name.gguf" ]] || cp "$vocab" "$dir/ggml-vocab-$name.gguf"
inp="${3:-$dir/ggml-vocab-bert-bge.gguf.inp}"
[[ "$inp" -ef "$dir/ggml-vocab-$name.gguf.inp" ]] || cp "$inp" "$dir/ggml-vocab-$name.gguf.inp"
"$exe" "$work/model.gguf" "$dir/ggml-vocab-$name.gguf.inp" "$bins" > "$dir/ggml-vocab-$name.gguf.out"
echo "wrote $dir/ggml-vocab-$name.gguf{,.inp,.out} ($(wc -l < "$dir/ggml-vocab-$name.gguf.out") cases)" >&2
