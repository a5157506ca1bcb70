#!/usr/bin/env bash
# Makes one encoder fixture of tests/fixtures/archs: a random-weight GGUF
# written by `tessera synth`, and the pooled embeddings llama.cpp computes on
# it for a few texts (node-llama-cpp's prebuilt libllama, as bench/llamacpp.sh
# fetches it; bench/embd_fixture.c drives it).
#
#   bench/embd_fixture.sh NAME SHAPE VOCAB [STD]
# writes tests/fixtures/archs/NAME.{gguf,json,embd.f32} from synth shape SHAPE
# (F16 weights, the vocabulary of the GGUF VOCAB, seed SEED (default 1),
# weights normal with standard deviation STD, default 0.1). Knobs
# (environment): BUILD (default build/release), CACHE, NLC_VERSION; DECODE=1
# for a decoder that embeds, TOKENS=1 for every token's state too.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
[[ $# -ge 3 ]] || { echo "usage: $0 NAME SHAPE VOCAB [STD]" >&2; exit 2; }
name="$1" shape="$2" vocab="$3" std="${4:-0.1}" seed="${SEED:-1}"
BUILD="${BUILD:-$here/build/release}"
CACHE="${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera-bench}"
NLC_VERSION="${NLC_VERSION:-3.22.1}"

source "$here/bench/llamacpp_fetch.sh"
exe="$(llamacpp_driver embd_fixture)"

out="$here/tests/fixtures/archs"
"$BUILD/bin/tessera" synth --shape "$shape" --type f16 --std "$std" --seed "$seed" \
  --vocab "$vocab" -o "$out/$name.gguf"
arch="$(set +o pipefail; strings -n 3 "$out/$name.gguf" | grep -m1 -A1 '^general.architecture$' | tail -1)"
body="$("$exe" "$out/$name.gguf" "$out/$name" "$bins" ${DECODE:+decode})"
# TOKENS=1: also every token's state with pooling none, NAME.tokens.embd.f32.
[[ -z "${TOKENS:-}" ]] || "$exe" "$out/$name.gguf" "$out/$name" "$bins" tokens
{
  echo "{"
  echo "  \"architecture\": \"$arch\","
  echo "  \"seed\": $seed,"
  echo "  \"shape\": \"$shape\","
  echo "  \"std\": $std,"
  echo "$body"
  echo "  \"embeddings\": \"$name.embd.f32\""
  echo "}"
} > "$out/$name.json"
echo "wrote $out/$name.json, $name.gguf and $name.embd.f32" >&2
