#!/usr/bin/env bash
# What a JSON-schema grammar adds to a decode step, tessera beside llama.cpp,
# on the same synthesized files (a 32k and a 128k vocabulary).
#
# Both sample with the same chain (top-k 40, top-p 0.95, min-p 0.05,
# temperature 0.8, a seed) over the same prompt. The grammar's cost is the
# sampling CPU time per token with the schema's grammar minus without it
# (the sampling thread's own CPU time, which other load on the machine
# hardly moves), as a share of the plain decode step:
#   tessera:   `tessera run -j SCHEMA` (its "sampling" line), the same run
#              without -j at the same number of tokens;
#   llama.cpp: bench/llamacpp_grammar.c, libllama's grammar sampler driven
#              as llama-cli / llama-server drive it (the chain samples, the
#              grammar checks that token, the whole vocabulary only when it
#              is refused), with the GBNF tessera prints for the schema
#              (`tessera run --print-grammar`: llama.cpp's syntax).
# Random weights write random JSON, so the grammar sees new states often
# (strings, numbers, keys): the hard case for a mask cache.
#
#   bench/grammar_overhead.sh                 # llama-100m (32k) and llama3-1b (128k), Q4_0
#   SHAPES="tinyllama-1.1b" REPS=5 bench/grammar_overhead.sh
#   LLAMACPP=0 bench/grammar_overhead.sh      # tessera only
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$here/build/release}"
SHAPES="${SHAPES:-llama-100m llama3-1b}"
REPS="${REPS:-3}"
THREADS="${THREADS:-2}"
N="${N:-160}"
LLAMACPP="${LLAMACPP:-1}"
CACHE="${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera-bench}"
NLC_VERSION="${NLC_VERSION:-3.22.1}"
tessera="$BUILD/bin/tessera"
schema='{"type":"object","properties":{"title":{"type":"string","maxLength":40},"year":{"type":"integer","minimum":1900,"maximum":2030},"tags":{"type":"array","items":{"type":"string","maxLength":12},"maxItems":6},"rating":{"type":"number"}},"required":["title","year","tags","rating"]}'
mkdir -p "$CACHE"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [[ "$LLAMACPP" == 1 ]]; then
  source "$here/bench/llamacpp_fetch.sh"
  exe="$(llamacpp_driver llamacpp_grammar)"
  "$tessera" run -m unused --print-grammar -j "$schema" > "$work/schema.gbnf"
fi

# tessera run's timings: "generated N tokens in T ms" and "sampling S ms of CPU".
timings() { awk '/^generated/ { n = $2; t = $5 } /^sampling/ { s = $2 } END { if (n > 0) printf "%d %.3f %.1f\n", n, t / n, 1000 * s / n }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
col() { awk -v c="$1" '{ print $c }'; }
share() { awk -v g="$1" -v p="$2" -v s="$3" 'BEGIN { printf "%+.1f%%", 100 * (g - p) / 1000 / s }'; }

echo "# grammar overhead — $(date -u +%Y-%m-%dT%H:%M:%SZ); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); $THREADS threads; medians of $REPS seeds"
echo
echo "| model | tokens | engine | decode ms/token | sampling us/token, plain | with the schema | added to a step |"
echo "| --- | ---: | --- | ---: | ---: | ---: | ---: |"
for shape in $SHAPES; do
  model="$CACHE/$shape-q4_0.gguf"
  [[ -f "$model" ]] || "$tessera" synth --shape "$shape" --type q4_0 -o "$model" >&2
  : > "$work/t" ; : > "$work/l"
  for ((s = 1; s <= REPS; ++s)); do
    g=$("$tessera" run -m "$model" -t "$THREADS" -p "Data:" -n "$N" --temp 0.8 -s "$s" -j "$schema" 2>&1 >/dev/null | timings)
    n=${g%% *}
    p=$("$tessera" run -m "$model" -t "$THREADS" -p "Data:" -n "$n" --temp 0.8 -s "$s" --ignore-eos 2>&1 >/dev/null | timings)
    echo "$n $(echo "$p" | col 2) $(echo "$p" | col 3) $(echo "$g" | col 3)" >> "$work/t"
    if [[ "$LLAMACPP" == 1 ]]; then
      lg=$("$exe" "$model" "$THREADS" "$N" "$s" "$work/schema.gbnf" "$bins" 2>/dev/null)
      lp=$("$exe" "$model" "$THREADS" "$(echo "$lg" | col 1)" "$s" - "$bins" 2>/dev/null)
      echo "$(echo "$lg" | col 1) $(echo "$lp" | col 2) $(echo "$lp" | col 3) $(echo "$lg" | col 3)" >> "$work/l"
    fi
  done
  for engine in tessera llama.cpp; do
    f="$work/t"
    [[ "$engine" == tessera ]] || f="$work/l"
    [[ -s "$f" ]] || continue
    n=$(col 1 < "$f" | median) step=$(col 2 < "$f" | median) sp=$(col 3 < "$f" | median) sg=$(col 4 < "$f" | median)
    echo "| $shape q4_0 | $n | $engine | $step | $sp | $sg | $(share "$sg" "$sp" "$step") |"
  done
done
