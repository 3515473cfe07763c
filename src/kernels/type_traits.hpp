// One traits row per tensor type (as ggml's type_traits): how to turn a row of the type into
// floats, how to quantize floats into it, and the dot product of a row of this type with a row of
// its partner type `vec_dot_type` (activations are quantized to the partner on the fly).
// Adding a type means filling one row, not editing every kernel.
//
// The functions here are the scalar references: obviously right, bit-identical to ggml's
// reference quantizers (quantize_row_*_ref). SIMD variants chosen at run time are tested
// against them.
#pragma once

#include <cstdint>

#include "core/dtype.hpp"

namespace syslm::kernels {

using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);
// x is a row of n elements of this type, y a row of n elements of vec_dot_type.
using VecDotFn = float (*)(int64_t n, const void* x, const void* y);

struct TypeTraits {
    DType type;
    ToFloatFn to_float;
    FromFloatFn from_float;
    VecDotFn vec_dot;
    DType vec_dot_type;
};

// Throws Error for types without compute support (I8..F64).
const TypeTraits& type_traits(DType t);
bool has_type_traits(DType t);

}  // namespace syslm::kernels
