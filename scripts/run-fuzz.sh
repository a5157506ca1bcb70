#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD_DIR/fuzz for SECONDS each, from a seed
# corpus plus the repository's GGUF files and chat templates. Fails on any crash, leak, timeout or OOM.
# Usage: scripts/run-fuzz.sh BUILD_DIR SECONDS
set -euo pipefail
build=$1
seconds=$2
root=$(cd "$(dirname "$0")/.." && pwd)

for target in "$build"/fuzz/fuzz_*; do
  [[ -x "$target" ]] || continue
  name=$(basename "$target")
  corpus=$(mktemp -d)
  seeds="$root/fuzz/corpus/$name"
  [[ -d "$seeds" ]] && cp "$seeds"/* "$corpus"/ 2>/dev/null || true
  max_len=8192
  timeout=5
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
  elif [[ "$name" == fuzz_grammar || "$name" == fuzz_json_schema ]]; then
    # Compiling is bounded by Limits: an input that takes a second is a finding.
    max_len=65536
    timeout=1
  fi
  echo "fuzz: $name for ${seconds}s (seeds: $(ls "$corpus" | wc -l))"
  log=$(mktemp)
  if ! "$target" "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 \
      -malloc_limit_mb=512 -timeout="$timeout" -max_len="$max_len" -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $name FAILED"
    exit 1
  fi
  grep -E 'stat::number_of_executed_units|stat::peak_rss_mb' "$log" | sed "s/^/fuzz: $name /"
  rm -rf "$corpus" "$log"
done
