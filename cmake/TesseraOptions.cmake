# Target-scoped compile settings shared by every tessera target.
# Usage: tessera_target_defaults(<target>)

function(tessera_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
                         -Wno-missing-field-initializers)
  if(TESSERA_SANITIZE)
    string(REPLACE ";" "," _san "${TESSERA_SANITIZE}")
    target_compile_options(${target} PRIVATE -fsanitize=${_san} -fno-omit-frame-pointer
                           -fno-sanitize-recover=all)
    target_compile_definitions(${target} PRIVATE _GLIBCXX_ASSERTIONS)
    if("address" IN_LIST TESSERA_SANITIZE)
      # One spelling for gcc's __SANITIZE_ADDRESS__ and clang's __has_feature.
      target_compile_definitions(${target} PRIVATE TESSERA_ASAN=1)
    endif()
    target_link_options(${target} PRIVATE -fsanitize=${_san})
  endif()
endfunction()

# The repository's data: models/ (the default model and the small models tests
# load) and tests/fixtures/ (llama.cpp's reference outputs), each with its
# PROVENANCE.md. Tests, benchmarks and fuzzers find them through these.
set(TESSERA_MODELS_DIR "${PROJECT_SOURCE_DIR}/models")
set(TESSERA_FIXTURES_DIR "${PROJECT_SOURCE_DIR}/tests/fixtures")
function(tessera_data_paths target)
  target_compile_definitions(${target} PRIVATE TESSERA_MODELS_DIR="${TESSERA_MODELS_DIR}"
                             TESSERA_FIXTURES_DIR="${TESSERA_FIXTURES_DIR}")
endfunction()
