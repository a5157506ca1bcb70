// <immintrin.h> for the avx512 tier. GCC 12's AVX-512 headers pass
// _mm512_undefined_* as the pass-through of unmasked builtins, which
// -Wuninitialized reports at every use; the warning is about the header, so
// it is silenced for the header's lines only.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
