// Registration of the x86 kernel variants, family by family. Each function overwrites the
// fields of the TypeTraits rows its family accelerates; register_avx2_kernels /
// register_avx512_kernels (type_traits.hpp) call them in order.
#pragma once

#include "kernels/type_traits.hpp"

namespace syslm::kernels::x86 {

// Row of `type` in rows[0..n), or nullptr.
TypeTraits* find_row(TypeTraits* rows, int n, DType type);

void register_float_avx2(TypeTraits* rows, int n);
void register_float_avx512(TypeTraits* rows, int n);

}  // namespace syslm::kernels::x86
