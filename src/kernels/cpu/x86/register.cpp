// Plain (non-ISA) file: the registration entry points and the row lookup they share.
#include "kernels/cpu/x86/x86_kernels.hpp"

namespace syslm::kernels {
namespace x86 {

TypeTraits* find_row(TypeTraits* rows, int n, DType type) {
    for (int i = 0; i < n; ++i)
        if (rows[i].type == type) return &rows[i];
    return nullptr;
}

}  // namespace x86

void register_avx2_kernels(TypeTraits* rows, int n) { x86::register_float_avx2(rows, n); }

void register_avx512_kernels(TypeTraits* rows, int n) { x86::register_float_avx512(rows, n); }

}  // namespace syslm::kernels
