#!/usr/bin/env bash
# Load time to the first token, tessera beside llama.cpp, on the files
# bench/run.sh synthesizes (run it first, or set CACHE): each run is a whole
# process, timed from its start to its exit after one token — tessera
# `run -n 1`, llama.cpp through bench/llamacpp_bench.c (REPS 0: load, a
# context, one token), both with the same context size and threads. The
# two engines alternate, REPS runs each; the table gives the median wall
# time, the ratio, and each process's peak RSS (its high-water mark, file
# pages it maps included) beside tessera's weight bytes.
#
# tessera runs two ways: "copy" (--weights-cache off: the weights read from the file and
# repacked into memory, as a first start does) and "image" (its weights image, written to a
# directory of this run by one start before the timed ones, then mapped: every later start);
# the note gives the writing start's time.
#
#   bench/load.sh                              # TinyLlama shape: q4_0 q8_0 q4_k_m f16, warm
#   COLD=1 bench/load.sh                       # also cold: the file evicted before each run
#   SHAPE=qwen3-30b-a3b LAYERS=24 TYPES=q4_k_m bench/load.sh
#
# Warm: the file read once before the runs, so it lies in the page cache (these machines
# reclaim it hard: a warm run can still read some of it from disk). Cold: the file's pages
# dropped before every run (posix_fadvise DONTNEED through dd; no root needed), and a
# plain read of the file timed the same way as the floor.
#
# Knobs (environment): SHAPE, LAYERS, TYPES, THREADS (2), CTX (640), REPS (5), COLD (0),
# WAYS ("copy image"), BUILD, CACHE, NLC_VERSION as bench/llamacpp.sh.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$here/build/release}"
SHAPE="${SHAPE:-tinyllama-1.1b}"
TYPES="${TYPES:-q4_0 q8_0 q4_k_m f16}"
THREADS="${THREADS:-2}"
CTX="${CTX:-640}"
REPS="${REPS:-5}"
COLD="${COLD:-0}"
WAYS="${WAYS:-copy image}"
CACHE="${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera-bench}"
NLC_VERSION="${NLC_VERSION:-3.22.1}"
tessera="$BUILD/bin/tessera"
[[ -x "$tessera" ]] || { echo "bench/load.sh: $tessera not found; build first (make build)" >&2; exit 1; }

source "$here/bench/llamacpp_fetch.sh"
exe="$(llamacpp_driver llamacpp_bench)"
images="$(mktemp -d "$CACHE/weights-images.XXXXXX")"
trap 'rm -rf "$images"' EXIT

# "SECONDS KIB" of one command: wall time and peak RSS.
timed() {
  local f
  f="$(mktemp)"
  /usr/bin/time -o "$f" -f '%e %M' "$@" >/dev/null 2>&1 || echo "bench/load.sh: failed: $*" >&2
  tail -1 "$f"
  rm -f "$f"
}
evict() { dd if="$1" iflag=nocache count=0 status=none; }
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
max() { sort -n | tail -1; }
range() { printf '%s\n' "$@" | sort -n | sed -n '1p;$p' | paste -sd- -; }  # "min-max" of the arguments

echo "# bench/load.sh — $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) logical CPUs;" \
  "tessera $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'), llama.cpp node-llama-cpp $NLC_VERSION prebuilt"
echo "# $THREADS threads, context $CTX, $REPS runs each, alternating; median wall seconds (min-max), peak RSS"
echo
echo "| file | cache | tessera | tessera s | llama.cpp s | ratio | tessera peak RSS | llama.cpp peak RSS | file |"
echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
modes="warm"
[[ "$COLD" == 1 ]] && modes="warm cold"
for type in $TYPES; do
  model="$CACHE/$SHAPE${LAYERS:+-L$LAYERS}-$type.gguf"
  [[ -f "$model" ]] || { echo "bench/load.sh: $model not found; run bench/run.sh first" >&2; exit 1; }
  size_mib=$(( $(stat -c %s "$model") >> 20 ))
  for way in $WAYS; do
    flags=(--weights-cache off) way_note=""
    if [[ "$way" == image ]]; then
      flags=(--weights-cache "$images")
      rm -rf "${images:?}"/*
      read -r s _ <<<"$(timed "$tessera" run -m "$model" -p "Hello" -n 1 -t "$THREADS" -c "$CTX" -s 1 "${flags[@]}")"
      way_note=" (the start writing it: $s s)"
    fi
    for mode in $modes; do
      ts=() tr=() ls=() lr=() rs=()
      [[ "$mode" == warm ]] && cat "$model" >/dev/null
      for ((r = 0; r < REPS; ++r)); do
        [[ "$mode" == cold ]] && { evict "$model"; for f in "$images"/*; do [[ -f "$f" ]] && evict "$f"; done; }
        read -r s k <<<"$(timed "$tessera" run -m "$model" -p "Hello" -n 1 -t "$THREADS" -c "$CTX" -s 1 "${flags[@]}")"
        ts+=("$s") tr+=("$k")
        [[ "$mode" == cold ]] && evict "$model"
        read -r s k <<<"$(timed "$exe" "$model" "$THREADS" 0 0 "$bins" 1)"
        ls+=("$s") lr+=("$k")
        if [[ "$mode" == cold ]]; then
          evict "$model"
          read -r s _ <<<"$(timed cat "$model")"
          rs+=("$s")
        fi
      done
      tm="$(printf '%s\n' "${ts[@]}" | median)"
      lm="$(printf '%s\n' "${ls[@]}" | median)"
      ratio="$(awk -v a="$tm" -v b="$lm" 'BEGIN {printf "%.2f", (b > 0) ? a / b : 0}')"
      note=""
      [[ "$mode" == cold ]] && note=" (a plain read: $(printf '%s\n' "${rs[@]}" | median) s)"
      echo "| $SHAPE${LAYERS:+ L$LAYERS} $type | $mode$note | $way$way_note | $tm ($(range "${ts[@]}")) |" \
        "$lm ($(range "${ls[@]}")) | ${ratio}× | $(( $(printf '%s\n' "${tr[@]}" | max) >> 10 )) MiB |" \
        "$(( $(printf '%s\n' "${lr[@]}" | max) >> 10 )) MiB | $size_mib MiB |"
    done
  done
done
