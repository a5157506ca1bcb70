# The two commands of the README:
#   make demo   install what is missing, build Release, run the main job on the default model
#   make test   install what is missing, build, run every test
# Other targets: build, asan, fuzz, bench, format, clean.

MODEL  ?= models/stories260K.gguf
PROMPT ?= Once upon a time, there was a little girl named Lily. She
JOBS   ?= $(shell nproc)
BUILD  := build/release

.PHONY: demo test build deps node-deps asan fuzz bench format clean

deps:
	@scripts/install-deps.sh

# bindings/node's npm packages, so the build makes the Node addon and ctest tests it.
node-deps: deps
	@scripts/node-deps.sh

build: deps node-deps
	@cmake --preset release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: deps
	@cmake --preset release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target tessera
	$(BUILD)/bin/tessera run -m $(MODEL) -p "$(PROMPT)" -n 200 -s 42

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# Tests again under AddressSanitizer + UndefinedBehaviorSanitizer, built by
# clang; the same build holds the libFuzzer targets, so `make fuzz` after it
# compiles only the fuzzers' own files.
FUZZ_TARGETS := fuzz_gguf fuzz_tokenizer fuzz_chat_template fuzz_http_request fuzz_grammar \
                fuzz_json_schema
asan:
	@scripts/install-deps.sh --ci
	@cmake --preset asan >/dev/null
	@cmake --build build/asan -j $(JOBS)
	@cd build/asan && ctest --output-on-failure -j $(JOBS)

# libFuzzer targets (in the asan build), run for FUZZ_SECONDS each from the seed corpus.
FUZZ_SECONDS ?= 60
fuzz:
	@scripts/install-deps.sh --ci
	@cmake --preset asan >/dev/null
	@cmake --build build/asan -j $(JOBS) --target $(FUZZ_TARGETS)
	@scripts/run-fuzz.sh build/asan $(FUZZ_SECONDS) $(JOBS)

bench: deps
	@cmake --preset release -DTESSERA_BUILD_BENCH=ON >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

format:
	@cmake --build $(BUILD) --target format

clean:
	rm -rf build
