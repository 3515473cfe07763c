// Plain (non-ISA) file: the registration entry points and the row lookup they share. The
// AVX-512 table starts as a copy of the AVX2 one (type_traits.cpp), so it keeps every AVX2
// kernel it does not replace (e.g. the activation quantizers).
#include "core/cpu_features.hpp"
#include "kernels/cpu/x86/x86_kernels.hpp"

namespace syslm::kernels {
namespace x86 {

TypeTraits* find_row(TypeTraits* rows, int n, DType type) {
    for (int i = 0; i < n; ++i)
        if (rows[i].type == type) return &rows[i];
    return nullptr;
}

}  // namespace x86

void register_avx2_kernels(TypeTraits* rows, int n) {
    x86::register_float_avx2(rows, n);
    x86::register_quant_avx2(rows, n);
    x86::register_act_quant_avx2(rows, n);
    x86::register_dequant_avx2(rows, n);
}

void register_avx512_kernels(TypeTraits* rows, int n) {
    x86::register_float_avx512(rows, n);
    x86::register_quant_avx512(rows, n);
    x86::register_quant_zmm_avx512(rows, n);
    // AVX512_BF16 is not part of the AVX-512 tier (isa.hpp): checked here, in baseline code.
    if (cpu_features().avx512bf16) x86::register_bf16_avx512(rows, n);
}

}  // namespace syslm::kernels
