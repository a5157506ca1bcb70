#!/usr/bin/env bash
# What a JSON-schema grammar adds to a decode step: `tessera run` with and
# without -j on the same synthesized file (alternating, REPS rounds each,
# medians of ms per generated token). Random weights write random JSON, so
# the grammar sees new states often (strings, numbers, keys), the hard case
# for its mask cache.
#
#   bench/grammar_overhead.sh                 # llama-100m and llama3-1b (128k vocabulary), Q4_0
#   SHAPES="tinyllama-1.1b" REPS=5 bench/grammar_overhead.sh
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$here/build/release}"
SHAPES="${SHAPES:-llama-100m llama3-1b}"
REPS="${REPS:-3}"
THREADS="${THREADS:-2}"
N="${N:-160}"
CACHE="${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera-bench}"
tessera="$BUILD/bin/tessera"
schema='{"type":"object","properties":{"title":{"type":"string","maxLength":40},"year":{"type":"integer","minimum":1900,"maximum":2030},"tags":{"type":"array","items":{"type":"string","maxLength":12},"maxItems":6},"rating":{"type":"number"}},"required":["title","year","tags","rating"]}'
mkdir -p "$CACHE"

ms_per_token() {  # the "generated" line of tessera run's timings
  sed -n 's/^generated *\([0-9]*\) tokens in *\([0-9.]*\) ms.*/\1 \2/p' | awk '{ if ($1 > 0) printf "%.3f %d\n", $2 / $1, $1 }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "# grammar overhead — $(date -u +%Y-%m-%dT%H:%M:%SZ); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); $THREADS threads"
echo
echo "| model | plain ms/token | JSON schema ms/token | tokens (schema) | added |"
echo "| --- | ---: | ---: | ---: | ---: |"
for shape in $SHAPES; do
  model="$CACHE/$shape-q4_0.gguf"
  [[ -f "$model" ]] || "$tessera" synth --shape "$shape" --type q4_0 -o "$model" >&2
  plain=() with=() counts=()
  for ((r = 0; r < REPS; ++r)); do
    for s in $((r + 1)); do
      p=$("$tessera" run -m "$model" -t "$THREADS" -p "Data:" -n "$N" --temp 0.8 -s "$s" --ignore-eos 2>&1 >/dev/null | ms_per_token)
      plain+=("${p%% *}")
      g=$("$tessera" run -m "$model" -t "$THREADS" -p "Data:" -n "$N" --temp 0.8 -s "$s" -j "$schema" 2>&1 >/dev/null | ms_per_token)
      with+=("${g%% *}") counts+=("${g##* }")
    done
  done
  mp=$(printf '%s\n' "${plain[@]}" | median)
  mg=$(printf '%s\n' "${with[@]}" | median)
  mc=$(printf '%s\n' "${counts[@]}" | median)
  echo "| $shape q4_0 | $mp | $mg | $mc | $(awk -v a="$mp" -v b="$mg" 'BEGIN { printf "%+.1f%%", 100 * (b / a - 1) }') |"
done
