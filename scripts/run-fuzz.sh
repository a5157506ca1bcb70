#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD_DIR/fuzz for SECONDS each, from a seed
# corpus plus the repository's GGUF files and chat templates, JOBS targets at a
# time (default: the cores; each fuzzer is one process on one core). Fails on
# any crash, leak, timeout or OOM, and prints that target's log.
# Usage: scripts/run-fuzz.sh BUILD_DIR SECONDS [JOBS]
set -euo pipefail
build=$1
seconds=$2
jobs=${3:-$(nproc)}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

# One target: its corpus under $work/NAME, its log in $work/NAME.log, its
# verdict in $work/NAME.rc.
fuzz_one() {
  local target=$1 name corpus seeds max_len=8192 timeout=5 rc=0
  name=$(basename "$target")
  corpus="$work/$name"
  mkdir "$corpus"
  seeds="$root/fuzz/corpus/$name"
  [[ -d "$seeds" ]] && cp "$seeds"/* "$corpus"/ 2>/dev/null || true
  if [[ "$name" == fuzz_gguf ]]; then
    # Seeds from the repository's models and vocab files (truncated copies keep runs fast).
    for f in "$root"/models/*.gguf "$root"/tests/fixtures/tokenizer/*.gguf; do
      [[ -f "$f" ]] && head -c 65536 "$f" > "$corpus/$(basename "$f").head"
    done
    max_len=1048576
  elif [[ "$name" == fuzz_chat_template ]]; then
    # Seeds: the real models' templates among the fixtures.
    for f in "$root"/tests/fixtures/chat-templates/*.jinja; do
      [[ -f "$f" ]] && cp "$f" "$corpus/"
    done
    max_len=16384
  elif [[ "$name" == fuzz_json_schema ]]; then
    # Compiling is bounded by Limits: an input that takes a second is a finding.
    max_len=65536
    timeout=1
  elif [[ "$name" == fuzz_grammar ]]; then
    # Compiling, and matching 32 bytes: a grammar at Limits (thousands of
    # stacks per character) takes ~1.5 s under ASan and coverage, ~70 times
    # its release time; one that takes 3 s is a finding.
    max_len=65536
    timeout=3
  fi
  echo "fuzz: $name for ${seconds}s (seeds: $(ls "$corpus" | wc -l))"
  "$target" "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 \
    -malloc_limit_mb=512 -timeout="$timeout" -max_len="$max_len" -print_final_stats=1 \
    >"$work/$name.log" 2>&1 || rc=$?
  echo "$rc" > "$work/$name.rc"
}

names=()
for target in "$build"/fuzz/fuzz_*; do
  [[ -x "$target" ]] || continue
  while (( $(jobs -rp | wc -l) >= jobs )); do wait -n || true; done
  fuzz_one "$target" &
  names+=("$(basename "$target")")
done
wait

failed=0
for name in "${names[@]}"; do
  if [[ "$(cat "$work/$name.rc" 2>/dev/null)" != 0 ]]; then
    tail -n 60 "$work/$name.log"
    echo "fuzz: $name FAILED"
    failed=1
    continue
  fi
  grep -E 'stat::number_of_executed_units|stat::peak_rss_mb' "$work/$name.log" | sed "s/^/fuzz: $name /"
done
exit "$failed"
