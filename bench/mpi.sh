#!/usr/bin/env bash
# Issue 28's pipeline table: a TinyLlama-shaped Q4_0 file (tessera synth,
# cached outside the tree; weights in anonymous memory once loaded) in one
# process and split across 2 MPI ranks on this machine:
#   - tokens/s of 8 and 16 parallel sequences (`tessera run --parallel`):
#     1 rank x 1 thread, 1 rank x 2 threads, 2 ranks x 1 thread. On 2 ranks
#     the serving loop keeps two groups of sequences in flight, so each rank
#     works on one group while the other rank works on the other;
#   - ms per token of one sequence on 1 and 2 ranks (1 thread each);
#   - bytes rank 0 sends rank 1 per token (hidden state plus pass inputs);
#   - prefill: `tessera perplexity` (chunks of 512 in micro-batches of 64,
#     all in flight), seconds of wall time on 1 and 2 ranks.
# Each row is the mean of REPS runs; the runs alternate.
#
#   bench/mpi.sh
#   N=64 REPS=3 BUILD=build/mpi bench/mpi.sh
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$here/build/release}"
N="${N:-32}"
REPS="${REPS:-2}"
CACHE="${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera-bench}"
MODEL="${MODEL:-$CACHE/tinyllama-1.1b-q4_0.gguf}"
tessera="$BUILD/bin/tessera"
mpirun=(mpirun --allow-run-as-root --oversubscribe)

[[ -x "$tessera" ]] || { echo "bench/mpi.sh: $tessera not found; build first" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "bench/mpi.sh: no mpirun (apt-get install openmpi-bin)" >&2; exit 1; }
if [[ ! -f "$MODEL" ]]; then
  mkdir -p "$(dirname "$MODEL")"
  "$tessera" synth --shape tinyllama-1.1b --type q4_0 -o "$MODEL" >&2
fi

# run RANKS THREADS SEQS -> "tok/s ms/token bytes/token" of one run
run() {
  local ranks=$1 threads=$2 seqs=$3 err
  local args=(run -m "$MODEL" -p "Once upon a time" -n "$N" --ignore-eos --temp 0.8 -s 1
              -t "$threads" --parallel "$seqs" -c 1024 --no-display-prompt)
  if [[ $ranks -gt 1 ]]; then
    err=$("${mpirun[@]}" -np "$ranks" "$tessera" "${args[@]}" 2>&1 >/dev/null)
  else
    err=$("$tessera" "${args[@]}" 2>&1 >/dev/null)
  fi
  local gen tps bytes
  gen=$(grep -E '^generated' <<<"$err")
  tps=$(sed -E 's/.*\(([0-9.]+) tok\/s\).*/\1/' <<<"$gen")
  bytes=$(grep -E '^pipeline +rank 0 sent' <<<"$err" | sed -E 's/.*\(([0-9]+) per token.*/\1/' || true)
  echo "$tps $(awk -v t="$tps" -v s="$seqs" 'BEGIN { printf "%.2f", (t > 0 ? 1000 * s / t : 0) }') ${bytes:--}"
}

configs=("1 1 8" "1 2 8" "2 1 8" "1 1 16" "1 2 16" "2 1 16" "1 1 1" "2 1 1")
declare -A sum_tps sum_ms last_bytes
for ((r = 0; r < REPS; r++)); do
  for c in "${configs[@]}"; do
    read -r tps ms bytes < <(run $c)
    sum_tps[$c]=$(awk -v a="${sum_tps[$c]:-0}" -v b="$tps" 'BEGIN { print a + b }')
    sum_ms[$c]=$(awk -v a="${sum_ms[$c]:-0}" -v b="$ms" 'BEGIN { print a + b }')
    last_bytes[$c]=$bytes
  done
done

echo "# bench/mpi.sh — $(date -u +%Y-%m-%dT%H:%M:%SZ), $(basename "$MODEL"), n=$N, $REPS runs each"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) logical CPUs"
printf "| %-5s | %-7s | %-4s | %9s | %10s | %13s | %8s |\n" ranks threads seqs "tok/s" "ms/step" "bytes/token" "vs 1x1"
printf "|-------|---------|------|-----------|------------|---------------|----------|\n"
for c in "${configs[@]}"; do
  read -r ranks threads seqs <<<"$c"
  tps=$(awk -v a="${sum_tps[$c]}" -v n="$REPS" 'BEGIN { printf "%.2f", a / n }')
  base=$(awk -v a="${sum_tps[1 1 $seqs]}" -v n="$REPS" 'BEGIN { printf "%.4f", a / n }')
  printf "| %-5s | %-7s | %-4s | %9s | %10s | %13s | %7sx |\n" "$ranks" "$threads" "$seqs" "$tps" \
    "$(awk -v a="${sum_ms[$c]}" -v n="$REPS" 'BEGIN { printf "%.2f", a / n }')" "${last_bytes[$c]}" \
    "$(awk -v t="$tps" -v b="$base" 'BEGIN { printf "%.2f", (b > 0 ? t / b : 0) }')"
done

# Prefill: perplexity over a text of 12 copies of tests/data/story.txt.
text=$(mktemp)
trap 'rm -f "$text"' EXIT
for ((i = 0; i < 12; i++)); do cat "$here/tests/data/story.txt"; done >"$text"
ppl() {
  local ranks=$1 t0 t1
  local args=(perplexity -m "$MODEL" -f "$text" -c 512 -b 512 -t 1)
  t0=$(date +%s.%N)
  if [[ $ranks -gt 1 ]]; then
    "${mpirun[@]}" -np "$ranks" "$tessera" "${args[@]}" >/dev/null 2>&1
  else
    "$tessera" "${args[@]}" >/dev/null 2>&1
  fi
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }'
}
declare -A ppl_sum
for ((r = 0; r < REPS; r++)); do
  for ranks in 1 2; do
    ppl_sum[$ranks]=$(awk -v a="${ppl_sum[$ranks]:-0}" -v b="$(ppl "$ranks")" 'BEGIN { print a + b }')
  done
done
echo
printf "| perplexity, 1 thread per rank | 1 rank | 2 ranks | speed-up |\n|---|---:|---:|---:|\n"
awk -v a="${ppl_sum[1]}" -v b="${ppl_sum[2]}" -v n="$REPS" \
  'BEGIN { printf "| 12 copies of story.txt in chunks of 512: seconds, loading included | %.2f | %.2f | %.2fx |\n", a / n, b / n, a / b }'
