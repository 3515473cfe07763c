// Registration of the x86 kernel variants, family by family. Each function overwrites the
// fields of the TypeTraits rows its family accelerates; register_avx2_kernels /
// register_avx512_kernels (type_traits.hpp) call them in order (register.cpp).
#pragma once

#include "kernels/type_traits.hpp"

namespace syslm::kernels::x86 {

// Row of `type` in rows[0..n), or nullptr.
TypeTraits* find_row(TypeTraits* rows, int n, DType type);

void register_float_avx2(TypeTraits* rows, int n);      // F32, F16, BF16 vec_dot
void register_quant_avx2(TypeTraits* rows, int n);      // quant vec_dot (quant_dot_body.hpp)
void register_act_quant_avx2(TypeTraits* rows, int n);  // Q8_0/Q8_1/Q8_K from_float_fast
void register_dequant_avx2(TypeTraits* rows, int n);    // to_float of the GEMM's quant types

void register_float_avx512(TypeTraits* rows, int n);  // F32, F16 vec_dot
void register_quant_avx512(TypeTraits* rows, int n);  // quant vec_dot on VNNI
void register_quant_zmm_avx512(TypeTraits* rows, int n);  // K-quant vec_dot, dequantization
void register_bf16_avx512(TypeTraits* rows, int n);   // BF16 vec_dot: needs AVX512_BF16

}  // namespace syslm::kernels::x86
