#!/usr/bin/env bash
# Stages the GPU check for a machine that has a GPU but none of tessera's
# Debian -dev packages: run here (nvcc needed, no GPU), it
# builds the CUDA backend for sm_$ARCH and writes one self-contained folder
# (git-ignored, under 60 MiB): the binaries, the shared libraries they need
# but glibc's own, the small models and texts the check reads, and check.sh.
# Carry the folder over and run `gpu-check/check.sh` there; run it here first:
# every GPU step skips with a line saying so.
#
#   bench/cuda_stage.sh            # -> gpu-check/
#
# Knobs: ARCH (90), BUILD (build/cuda-stage), OUT (gpu-check).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
ARCH="${ARCH:-90}"
BUILD="${BUILD:-$here/build/cuda-stage}"
OUT="${OUT:-$here/gpu-check}"
command -v nvcc >/dev/null || { echo "cuda_stage.sh: nvcc not found (put the CUDA toolkit's bin/ on PATH)" >&2; exit 1; }

# OpenBLAS stays out: 36 MB, and the GPU is what this checks.
cmake -S "$here" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON \
  -DTESSERA_CUDA_ARCHITECTURES="$ARCH" -DTESSERA_BLAS=OFF >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target tessera conformance_test cuda_test

rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib" "$OUT/models" "$OUT/fixtures/tokenizer" "$OUT/data"
cp "$BUILD/bin/tessera" "$BUILD/tests/conformance_test" "$BUILD/tests/cuda_test" "$OUT/bin/"
# Every library the binaries load but glibc's own (libstdc++ too: the GPU
# machine's may be older than the one these were built with).
for b in "$OUT"/bin/*; do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*) ;;
    *) cp -L "$lib" "$OUT/lib/" ;;
  esac
done
cp "$here/models/stories260K.gguf" "$OUT/models/"
cp "$here/tests/fixtures/tokenizer/ggml-vocab-llama-spm.gguf" "$OUT/fixtures/tokenizer/"
cp "$here/tests/data/story.txt" "$OUT/data/"
cp "$here/bench/gpu_check.sh" "$OUT/check.sh"
chmod +x "$OUT/check.sh"
git -C "$here" rev-parse --short HEAD > "$OUT/COMMIT" 2>/dev/null || true

size_kib=$(du -sk "$OUT" | cut -f1)
echo "staged $OUT: $((size_kib / 1024)) MiB ($(ls "$OUT/lib" | wc -l) libraries); run $(basename "$OUT")/check.sh on the GPU machine"
if (( size_kib > 60 * 1024 )); then
  echo "cuda_stage.sh: the folder is over 60 MiB" >&2
  exit 1
fi
