#!/usr/bin/env bash
# Makes one architecture fixture of tests/fixtures/archs: a random-weight
# GGUF written by `tessera synth`, and what llama.cpp computes on it
# (node-llama-cpp's prebuilt libllama, as bench/llamacpp.sh fetches it;
# bench/arch_fixture.c drives it): prompt logits, greedy tokens, margin.
#
#   bench/arch_fixture.sh NAME SHAPE [STD]
# writes tests/fixtures/archs/NAME.{gguf,json,logits.f32} from synth shape
# SHAPE (F16 weights, the stories260K vocabulary, seed SEED (default 1), weights normal
# with standard deviation STD, default 0.1). Knobs (environment): BUILD (the
# build folder with bin/tessera, default build/release), CACHE, NLC_VERSION.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
[[ $# -ge 2 ]] || { echo "usage: $0 NAME SHAPE [STD]" >&2; exit 2; }
name="$1" shape="$2" std="${3:-0.1}" seed="${SEED:-1}"
BUILD="${BUILD:-$here/build/release}"
CACHE="${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera-bench}"
NLC_VERSION="${NLC_VERSION:-3.22.1}"

source "$here/bench/llamacpp_fetch.sh"
exe="$(llamacpp_driver arch_fixture)"

out="$here/tests/fixtures/archs"
"$BUILD/bin/tessera" synth --shape "$shape" --type f16 --std "$std" --seed "$seed" \
  --vocab "$here/models/stories260K.gguf" -o "$out/$name.gguf"
arch="$(set +o pipefail; strings -n 3 "$out/$name.gguf" | grep -m1 -A1 '^general.architecture$' | tail -1)"
body="$("$exe" "$out/$name.gguf" "$out/$name" "$bins")"
{
  echo "{"
  echo "  \"architecture\": \"$arch\","
  echo "  \"seed\": $seed,"
  echo "  \"shape\": \"$shape\","
  echo "  \"std\": $std,"
  echo "$body"
  echo "  \"logits\": \"$name.logits.f32\""
  echo "}"
} > "$out/$name.json"
echo "wrote $out/$name.json, $name.gguf and $name.logits.f32" >&2
