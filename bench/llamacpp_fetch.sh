# Sourced by the bench scripts that run llama.cpp: node-llama-cpp's
# prebuilt llama.cpp (CPU variants chosen at run time) from the npm registry,
# fetched once into $CACHE. Needs CACHE and NLC_VERSION; sets lib (the
# folder), bins (its libraries), llama_so and ggml_so (their file names), and
# defines llamacpp_driver (below).
lib="$CACHE/llamacpp-$NLC_VERSION"
bins="$lib/package/bins/linux-x64"
if [[ ! -f "$bins/libllama.v0.5.0.so" ]]; then
  echo "fetching @node-llama-cpp/linux-x64@$NLC_VERSION from npm into $lib ..." >&2
  mkdir -p "$lib"
  (cd "$lib" && npm pack --silent "@node-llama-cpp/linux-x64@$NLC_VERSION" >/dev/null &&
    tar xzf node-llama-cpp-linux-x64-"$NLC_VERSION".tgz)
fi
llama_so="$(cd "$bins" && ls libllama.v*.so | head -1)"
ggml_so="$(cd "$bins" && ls libggml.v*.so | head -1)"

# llamacpp_driver NAME [CFLAGS...]: bench/NAME.c (a driver of libllama's C API,
# llamacpp_api.h) built against these libraries into $lib/NAME, again when it
# or llamacpp_api.h is newer than the build; prints the executable's path.
llamacpp_driver() {
  local name="$1"
  shift
  local dir src out
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  src="$dir/$name.c"
  out="$lib/$name"
  if [[ ! -x "$out" || "$src" -nt "$out" || "$dir/llamacpp_api.h" -nt "$out" ]]; then
    cc -O2 -std=c11 "$@" -o "$out" "$src" -L"$bins" -l:"$llama_so" -l:"$ggml_so" -l:libggml-base.so \
      -lm -Wl,-rpath,"$bins" >&2 || return 1
  fi
  echo "$out"
}
