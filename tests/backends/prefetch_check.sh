#!/usr/bin/env bash
# The GEMV group kernels must issue their software prefetches (panels.h's
# prefetch_block). GCC 12 once left them out without a word (see
# docs/cpu-kernels.md, "GEMV and prefetch"): results
# stay exact, so no other test can see it, and decode lost ~7%. Every
# function in the given object or library whose name holds "GemvGroup" and
# that does integer dot products must also hold a prefetcht0.
#
#   prefetch_check.sh build/release/src/libtessera_backend_cpu.a
set -euo pipefail
lib="${1:?usage: prefetch_check.sh LIBRARY}"
if ! command -v objdump >/dev/null; then
  echo "prefetch_check.sh: objdump not found (Debian package binutils)" >&2
  exit 1
fi
objdump -d --no-show-raw-insn -C "$lib" | awk '
  /^[0-9a-f]+ <.*>:$/ { name = $0; next }
  name ~ /GemvGroup/ && /vpdpbusd|vpmaddubsw/ { dots[name] = 1 }
  name ~ /GemvGroup/ && /prefetcht0/ { prefetches[name] = 1 }
  END {
    n = 0; bad = 0
    for (f in dots) {
      n++
      if (!(f in prefetches)) { print "no software prefetch in " f; bad = 1 }
    }
    if (n == 0) { print "no GEMV group kernel found in the library"; exit 1 }
    if (!bad) print n " GEMV group kernels, each with its software prefetches"
    exit bad
  }'
