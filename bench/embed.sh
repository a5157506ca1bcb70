#!/usr/bin/env bash
# Embedding throughput beside llama.cpp (issue 46): N_DOCS documents of 32-256
# tokens through a BERT-shaped file, `tessera embed` against llama.cpp's
# libllama driven as llama-embedding drives it (bench/llamacpp_embed.c), the
# npm prebuilt (node-llama-cpp) and, when NATIVE names one, a natively built
# libllama; engines alternate, REPS rounds; tokens per second of the
# embedding loop (each side's tokenizing and loading excluded).
#
# Knobs (environment): SHAPE (bge-base-en-v1.5), TYPES (f16,q8_0), N_DOCS
# (1000), THREADS (2), REPS (2), N_BATCH (2048 tokens a pass), N_SEQ (64
# sequences a pass), NATIVE (a folder with a native libllama.so; default
# ~/llamacpp-native/bin when it exists), BUILD, CACHE, NLC_VERSION.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$here/build/release}"
CACHE="${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera-bench}"
NLC_VERSION="${NLC_VERSION:-3.22.1}"
SHAPE="${SHAPE:-bge-base-en-v1.5}" TYPES="${TYPES:-f16,q8_0}" N_DOCS="${N_DOCS:-1000}"
THREADS="${THREADS:-2}" REPS="${REPS:-2}" N_BATCH="${N_BATCH:-2048}" N_SEQ="${N_SEQ:-64}"
NATIVE="${NATIVE:-$([[ -f $HOME/llamacpp-native/bin/libllama.so ]] && echo "$HOME/llamacpp-native/bin" || true)}"
tessera="$BUILD/bin/tessera"
vocab="$here/tests/fixtures/tokenizer/ggml-vocab-bert-bge.gguf"

source "$here/bench/llamacpp_fetch.sh"
npm_exe="$(llamacpp_driver llamacpp_embed)"
native_exe=""
if [[ -n "$NATIVE" ]]; then
  native_exe="$CACHE/llamacpp_embed-native"
  if [[ ! -x "$native_exe" || "$here/bench/llamacpp_embed.c" -nt "$native_exe" ]]; then
    cc -O2 -std=c11 -o "$native_exe" "$here/bench/llamacpp_embed.c" -L"$NATIVE" -lllama -lggml -lggml-base \
      -lm -Wl,-rpath,"$NATIVE" >&2
  fi
fi

docs="$CACHE/embed-docs-$N_DOCS.txt"
if [[ ! -f "$docs" ]]; then
  python3 - "$docs" "$N_DOCS" <<'PY'
import random, sys
words = ("the of and to in is was for on that with as by at from it an be this are or which have "
         "has had not but were been one all their there they more when will would can who about "
         "into time only new some could these two may first then do any like other than now its "
         "also after use over such made most many before must through back years where much your "
         "way well down should because each just those people how too little state good very make "
         "world still own see men work long get here between both life being under never day same "
         "another know while last might us great old year off come since against go came right "
         "used take three states himself few house during without again place american around "
         "however home small found thought went say part once general high upon school every "
         "don't does got united left number course war until always away something fact though "
         "water less public put think almost hand enough far took head yet government system "
         "better set told nothing night end why called didn't eyes find going look asked later "
         "knew point next program city business give group toward young days let room president "
         "side social given present several order national possible rather second face per among "
         "form important often things looked early white case john become large big need four "
         "within felt along children saw best church ever least power development light thing").split()
path, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(46)
with open(path, "w") as f:
    for _ in range(n):
        f.write(" ".join(rng.choice(words) for _ in range(rng.randint(28, 240))) + ".\n")
PY
fi

echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $THREADS threads; $SHAPE; $N_DOCS documents ($(wc -w < "$docs") words); passes of $N_BATCH tokens, $N_SEQ sequences"
echo "| type | round | tessera embed tok/s | llama.cpp npm tok/s | ratio | llama.cpp native tok/s | ratio |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
IFS=, read -ra types <<< "$TYPES"
for type in "${types[@]}"; do
  model="$CACHE/$SHAPE-$type.gguf"
  [[ -f "$model" ]] || "$tessera" synth --shape "$SHAPE" --type "$type" --vocab "$vocab" -o "$model" >&2
  for ((r = 1; r <= REPS; ++r)); do
    t=$("$tessera" embed -m "$model" -f "$docs" -t "$THREADS" -b "$N_BATCH" --weights-cache off \
        --embd-output-format array 2>&1 >/dev/null | grep -oE '\(([0-9.]+) tokens/s\)' | grep -oE '[0-9.]+' | head -1)
    n=$("$npm_exe" "$model" "$docs" "$THREADS" "$N_BATCH" "$N_SEQ" "$bins" 2>/dev/null | grep -oE 'tokens/s [0-9.]+' | cut -d' ' -f2)
    m="-"
    [[ -n "$native_exe" ]] && m=$("$native_exe" "$model" "$docs" "$THREADS" "$N_BATCH" "$N_SEQ" 2>/dev/null | grep -oE 'tokens/s [0-9.]+' | cut -d' ' -f2)
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0) printf "%.2fx", a / b; else print "-" }'; }
    echo "| $type | $r | $t | $n | $(ratio "$t" "$n") | $m | $(ratio "$t" "$m") |"
  done
done
