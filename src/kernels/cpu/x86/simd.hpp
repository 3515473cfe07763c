// <immintrin.h> for the ISA files. GCC 12's AVX-512 headers initialise "undefined" vectors from
// themselves, which -Wuninitialized reports at the header line (GCC bug 105593); the warning is
// silenced for the header's lines only, so the kernels themselves stay fully warned.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning: clang warns about the unknown name instead
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
