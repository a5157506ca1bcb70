# Sourced by bench/llamacpp.sh and bench/quantize_compare.sh: node-llama-cpp's
# prebuilt llama.cpp (CPU variants chosen at run time) from the npm registry,
# fetched once into $CACHE. Needs CACHE and NLC_VERSION; sets lib (the
# folder), bins (its libraries), llama_so and ggml_so (their file names).
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
