// One traits row per tensor type (as ggml's type_traits): how to turn a row of the type into
// floats, how to quantize floats into it, and the dot product of a row of this type with a row of
// its partner type `vec_dot_type` (activations are quantized to the partner on the fly).
// Adding a type means filling one row, not editing every kernel.
//
// Each ISA (kernels/isa.hpp) has its own table: the scalar references — obviously right,
// bit-identical to ggml's reference quantizers (quantize_row_*_ref) — with the fields an ISA
// accelerates overwritten by its register function. Variants are tested against the scalar
// table.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"
#include "kernels/isa.hpp"

namespace syslm::kernels {

using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);
// x is a row of n elements of this type, y a row of n elements of vec_dot_type.
using VecDotFn = float (*)(int64_t n, const void* x, const void* y);
// nr rows of this type, bx bytes apart starting at x, each dotted with the one row y:
// s[r] = vec_dot(n, x + r * bx, y). Decode's kernel: a variant loads each activation block once
// for several weight rows. The scalar reference is the loop over vec_dot.
using VecDotRowsFn = void (*)(int64_t n, int nr, const void* x, size_t bx, const void* y, float* s);
// The same for nt activation rows, by bytes apart starting at y: s[t * bs + r] =
// vec_dot(n, x + r * bx, y + t * by). A variant reads each weight vector once for several tokens
// (a few sequences batched, a draft being verified); it must give, for every (r, t), exactly
// what its vec_dot_rows gives for that row and token alone, so a token's logits do not depend on
// what it was batched with.
using VecDotTokensFn = void (*)(int64_t n, int nr, const void* x, size_t bx, int nt,
                                const void* y, size_t by, float* s, size_t bs);

struct TypeTraits {
    DType type;
    ToFloatFn to_float;
    FromFloatFn from_float;       // exact reference quantizer: used to write weights
    FromFloatFn from_float_fast;  // for activations on the fly; may round ties differently
    VecDotFn vec_dot;
    DType vec_dot_type;
    // Null in an ISA table (never in the scalar one) where that ISA has no multi-row kernel for
    // the type: loop over vec_dot then (see vec_dot_rows() below).
    VecDotRowsFn vec_dot_rows;
    // Null where the ISA has no multi-token kernel for the type (always in the scalar table):
    // vec_dot_tokens() below loops over the tokens' vec_dot_rows then.
    VecDotTokensFn vec_dot_tokens = nullptr;
};

// s[r] = tt.vec_dot(n, x + r * bx, y) for r < nr, through tt.vec_dot_rows where it has one.
void vec_dot_rows(const TypeTraits& tt, int64_t n, int nr, const void* x, size_t bx, const void* y,
                  float* s);  // defined out of line: ISA files include this

// s[t * bs + r] for r < nr, t < nt, through tt.vec_dot_tokens where it has one.
void vec_dot_tokens(const TypeTraits& tt, int64_t n, int nr, const void* x, size_t bx, int nt,
                    const void* y, size_t by, float* s, size_t bs);

// One row of n_per_row floats -> blocks, each element's error weighted by importance[column]
// (llama-quantize --imatrix; ggml's quantize_row_*_impl, bit for bit).
using FromFloatImatrixFn = void (*)(const float* src, void* dst, int64_t n_per_row,
                                    const float* importance);
// nullptr for types whose quantizer has no weighted form (as in ggml: Q8_0, the float types).
// ggml's (quantize_row_*_impl, bit for bit), for every type that has one:
FromFloatImatrixFn ggml_imatrix_quantizer(DType t);
// What syslm quantizes with: ggml's, except Q2_K, where it is the plain quantizer's own search
// with every fit weight (|x|) times its column's importance (uniform importance gives the plain
// blocks exactly). ggml's weighted Q2_K search weights fits by sqrt(sigma^2 + x^2) and on the
// models of bench/compress it lost to the plain quantizer, even with uniform importance.
FromFloatImatrixFn imatrix_quantizer(DType t);

// Q8_0 blocks all with the scale d (f16-rounded), values clipped at ±127 d: the weights and the
// statically scaled activations of W8A8 (compress/quantize_model.hpp).
void quantize_q8_0_with_scale(const float* src, void* dst, int64_t n, float d);

// Throws Error for types without compute support (I8..F64).
const TypeTraits& type_traits(DType t);           // the active ISA's row
const TypeTraits& type_traits(DType t, Isa isa);  // a given variant; throws if unsupported here
bool has_type_traits(DType t);

// Defined in the ISA files: overwrite the fields of rows[0..n) that the ISA accelerates.
void register_avx2_kernels(TypeTraits* rows, int n);
void register_avx512_kernels(TypeTraits* rows, int n);

}  // namespace syslm::kernels
