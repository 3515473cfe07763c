// The scalar reference row functions behind the TypeTraits table (kernels/type_traits.hpp),
// grouped by family. All take n = number of elements, a multiple of the type's block size
// (checked by the callers that know the tensor: type_traits users, quantize_model).
//
//   dequantize_row_<t>(src, dst, n)  blocks of <t> -> n floats
//   quantize_row_<t>(src, dst, n)    n floats -> blocks of <t>, bit-identical to ggml's
//                                    quantize_row_<t>_ref (the quantizer llama-quantize uses
//                                    without an importance matrix)
//   vec_dot_<t>_<p>(n, x, y)         dot product of a row of <t> with a row of its partner <p>
//
// Dot products multiply integers inside each (sub-)block exactly and accumulate the scaled
// block results in double, so they equal the dot product of the dequantized operands up to
// float rounding of the per-block scale products.
#pragma once

#include <cstdint>

namespace syslm::kernels {

// float_types.cpp
void dequantize_row_f32(const void* src, float* dst, int64_t n);
void quantize_row_f32(const float* src, void* dst, int64_t n);
float vec_dot_f32_f32(int64_t n, const void* x, const void* y);
void dequantize_row_f16(const void* src, float* dst, int64_t n);
void quantize_row_f16(const float* src, void* dst, int64_t n);
float vec_dot_f16_f16(int64_t n, const void* x, const void* y);
void dequantize_row_bf16(const void* src, float* dst, int64_t n);
void quantize_row_bf16(const float* src, void* dst, int64_t n);
float vec_dot_bf16_bf16(int64_t n, const void* x, const void* y);

// legacy_quants.cpp
void dequantize_row_q4_0(const void* src, float* dst, int64_t n);
void quantize_row_q4_0(const float* src, void* dst, int64_t n);
float vec_dot_q4_0_q8_0(int64_t n, const void* x, const void* y);
void dequantize_row_q4_1(const void* src, float* dst, int64_t n);
void quantize_row_q4_1(const float* src, void* dst, int64_t n);
float vec_dot_q4_1_q8_1(int64_t n, const void* x, const void* y);
void dequantize_row_q5_0(const void* src, float* dst, int64_t n);
void quantize_row_q5_0(const float* src, void* dst, int64_t n);
float vec_dot_q5_0_q8_0(int64_t n, const void* x, const void* y);
void dequantize_row_q5_1(const void* src, float* dst, int64_t n);
void quantize_row_q5_1(const float* src, void* dst, int64_t n);
float vec_dot_q5_1_q8_1(int64_t n, const void* x, const void* y);
void dequantize_row_q8_0(const void* src, float* dst, int64_t n);
void quantize_row_q8_0(const float* src, void* dst, int64_t n);
// Q8_0 blocks that all use the scale d (rounded to f16): values beyond ±127 d are clipped.
// Per-channel int8 weights (d from the row's maximum) and static activation scales (W8A8).
void quantize_row_q8_0_scaled(const float* src, void* dst, int64_t n, float d);
float vec_dot_q8_0_q8_0(int64_t n, const void* x, const void* y);
void dequantize_row_q8_1(const void* src, float* dst, int64_t n);
void quantize_row_q8_1(const float* src, void* dst, int64_t n);
float vec_dot_q8_1_q8_1(int64_t n, const void* x, const void* y);

// k_quants.cpp
void dequantize_row_q2_k(const void* src, float* dst, int64_t n);
void quantize_row_q2_k(const float* src, void* dst, int64_t n);
float vec_dot_q2_k_q8_k(int64_t n, const void* x, const void* y);
void dequantize_row_q3_k(const void* src, float* dst, int64_t n);
void quantize_row_q3_k(const float* src, void* dst, int64_t n);
float vec_dot_q3_k_q8_k(int64_t n, const void* x, const void* y);
void dequantize_row_q4_k(const void* src, float* dst, int64_t n);
void quantize_row_q4_k(const float* src, void* dst, int64_t n);
float vec_dot_q4_k_q8_k(int64_t n, const void* x, const void* y);
void dequantize_row_q5_k(const void* src, float* dst, int64_t n);
void quantize_row_q5_k(const float* src, void* dst, int64_t n);
float vec_dot_q5_k_q8_k(int64_t n, const void* x, const void* y);
void dequantize_row_q6_k(const void* src, float* dst, int64_t n);
void quantize_row_q6_k(const float* src, void* dst, int64_t n);
float vec_dot_q6_k_q8_k(int64_t n, const void* x, const void* y);
void dequantize_row_q8_k(const void* src, float* dst, int64_t n);
void quantize_row_q8_k(const float* src, void* dst, int64_t n);
float vec_dot_q8_k_q8_k(int64_t n, const void* x, const void* y);

// Importance-weighted quantizers (legacy_quants.cpp, k_quants.cpp): ggml's quantize_row_*_impl
// with quant_weights, bit-identical to what llama-quantize --imatrix writes. n is ONE row
// (legacy types use the row's mean square) and importance[j] weighs column j of it.
void quantize_row_q4_0_imatrix(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q4_1_imatrix(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q5_0_imatrix(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q5_1_imatrix(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q2_k_imatrix(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q2_k_imatrix_ref_search(const float* src, void* dst, int64_t n,
                                          const float* importance);
void quantize_row_q3_k_imatrix(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q4_k_imatrix(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q5_k_imatrix(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q6_k_imatrix(const float* src, void* dst, int64_t n, const float* importance);

// grouped_quants.cpp: the run-time layouts Q4_0_G8 / Q8_0_G8 / Q8_0_G8W (block_layouts.hpp), each
// defined by its conversion from and to the file type it regroups.
void q4_0_to_g8(const void* src, void* dst, int64_t n);  // Q4_0 row -> Q4_0_G8 row
void g8_to_q4_0(const void* src, void* dst, int64_t n);
void q8_0_to_g8(const void* src, void* dst, int64_t n);  // Q8_0 row -> Q8_0_G8 row
void g8_to_q8_0(const void* src, void* dst, int64_t n);
void dequantize_row_q4_0_g8(const void* src, float* dst, int64_t n);
void quantize_row_q4_0_g8(const float* src, void* dst, int64_t n);
float vec_dot_q4_0_g8_q8_0_g8(int64_t n, const void* x, const void* y);
void dequantize_row_q8_0_g8(const void* src, float* dst, int64_t n);
void quantize_row_q8_0_g8(const float* src, void* dst, int64_t n);
float vec_dot_q8_0_g8_q8_0_g8(int64_t n, const void* x, const void* y);
void q8_0_to_g8w(const void* src, void* dst, int64_t n);  // Q8_0 row -> Q8_0_G8W row
void g8w_to_q8_0(const void* src, void* dst, int64_t n);
void dequantize_row_q8_0_g8w(const void* src, float* dst, int64_t n);
void quantize_row_q8_0_g8w(const float* src, void* dst, int64_t n);
float vec_dot_q8_0_g8w_q8_0_g8(int64_t n, const void* x, const void* y);

// lane_quants.cpp: Q4_K_LANE, Q5_K_LANE, Q6_K_LANE and Q8_K_LANE, the file types' blocks with their
// levels in lane order (block_layouts.hpp), each defined by its conversion from and to the file
// type. The lane order is a transpose, its own inverse: each *_to_lane also turns a lane-order
// row back into the file type's.
void q4_k_to_lane(const void* src, void* dst, int64_t n);  // Q4_K row <-> Q4_K_LANE row
void q5_k_to_lane(const void* src, void* dst, int64_t n);  // Q5_K row <-> Q5_K_LANE row
void q6_k_to_lane(const void* src, void* dst, int64_t n);  // Q6_K row <-> Q6_K_LANE row
void q8_k_to_lane(const void* src, void* dst, int64_t n);  // Q8_K row <-> Q8_K_LANE row
void dequantize_row_q4_k_lane(const void* src, float* dst, int64_t n);
void quantize_row_q4_k_lane(const float* src, void* dst, int64_t n);
float vec_dot_q4_k_lane_q8_k_lane(int64_t n, const void* x, const void* y);
void dequantize_row_q5_k_lane(const void* src, float* dst, int64_t n);
void quantize_row_q5_k_lane(const float* src, void* dst, int64_t n);
float vec_dot_q5_k_lane_q8_k_lane(int64_t n, const void* x, const void* y);
void dequantize_row_q6_k_lane(const void* src, float* dst, int64_t n);
void quantize_row_q6_k_lane(const float* src, void* dst, int64_t n);
float vec_dot_q6_k_lane_q8_k_lane(int64_t n, const void* x, const void* y);
void dequantize_row_q8_k_lane(const void* src, float* dst, int64_t n);
void quantize_row_q8_k_lane(const float* src, void* dst, int64_t n);
float vec_dot_q8_k_lane_q8_k_lane(int64_t n, const void* x, const void* y);

}  // namespace syslm::kernels
