# Target-scoped compile settings shared by every tessera target.
# Usage: tessera_target_defaults(<target>)

function(tessera_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
                         -Wno-missing-field-initializers)
  target_compile_definitions(${target} PRIVATE TESSERA_SHARED_DIR="${TESSERA_SHARED_DIR}")
  if(TESSERA_SANITIZE)
    string(REPLACE ";" "," _san "${TESSERA_SANITIZE}")
    target_compile_options(${target} PRIVATE -fsanitize=${_san} -fno-omit-frame-pointer
                           -fno-sanitize-recover=all)
    target_compile_definitions(${target} PRIVATE _GLIBCXX_ASSERTIONS)
    target_link_options(${target} PRIVATE -fsanitize=${_san})
  endif()
endfunction()

# ../shared beside the checkout holds models and fixtures used by tests and the demo.
get_filename_component(_default_shared "${CMAKE_SOURCE_DIR}/../shared" ABSOLUTE)
set(TESSERA_SHARED_DIR "${_default_shared}" CACHE PATH "Folder with models/ and fixtures/")
