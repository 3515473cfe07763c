// The per-type table of scalar reference kernels (see type_traits.hpp). Partners follow ggml:
// legacy symmetric types dot against Q8_0, legacy types with a min against Q8_1 (whose block sum
// serves the min term), K-quants against Q8_K. Q8_1 and Q8_K, which ggml uses only as partners,
// dot against themselves so every row of the table is complete; so do Q8_0_G8, the partner
// of the load-time layouts Q4_0_G8 and Q8_0_G8W, and Q8_K_LANE, that of Q4_K_LANE, Q5_K_LANE and
// Q6_K_LANE (kernels/repack.hpp).
#include "kernels/type_traits.hpp"

#include <array>
#include <optional>

#include "core/error.hpp"
#include "kernels/quants/quant_rows.hpp"

namespace syslm::kernels {
namespace {

// The reference vec_dot_rows: one vec_dot per row.
template <VecDotFn dot>
void vec_dot_rows_loop(int64_t n, int nr, const void* x, size_t bx, const void* y, float* s) {
    for (int r = 0; r < nr; ++r) s[r] = dot(n, static_cast<const uint8_t*>(x) + r * bx, y);
}

constexpr std::array kTraits = {
    TypeTraits{DType::F32, dequantize_row_f32, quantize_row_f32, quantize_row_f32, vec_dot_f32_f32,
               DType::F32, vec_dot_rows_loop<vec_dot_f32_f32>},
    TypeTraits{DType::F16, dequantize_row_f16, quantize_row_f16, quantize_row_f16, vec_dot_f16_f16,
               DType::F16, vec_dot_rows_loop<vec_dot_f16_f16>},
    TypeTraits{DType::BF16, dequantize_row_bf16, quantize_row_bf16, quantize_row_bf16,
               vec_dot_bf16_bf16, DType::BF16, vec_dot_rows_loop<vec_dot_bf16_bf16>},
    TypeTraits{DType::Q4_0, dequantize_row_q4_0, quantize_row_q4_0, quantize_row_q4_0,
               vec_dot_q4_0_q8_0, DType::Q8_0, vec_dot_rows_loop<vec_dot_q4_0_q8_0>},
    TypeTraits{DType::Q4_1, dequantize_row_q4_1, quantize_row_q4_1, quantize_row_q4_1,
               vec_dot_q4_1_q8_1, DType::Q8_1, vec_dot_rows_loop<vec_dot_q4_1_q8_1>},
    TypeTraits{DType::Q5_0, dequantize_row_q5_0, quantize_row_q5_0, quantize_row_q5_0,
               vec_dot_q5_0_q8_0, DType::Q8_0, vec_dot_rows_loop<vec_dot_q5_0_q8_0>},
    TypeTraits{DType::Q5_1, dequantize_row_q5_1, quantize_row_q5_1, quantize_row_q5_1,
               vec_dot_q5_1_q8_1, DType::Q8_1, vec_dot_rows_loop<vec_dot_q5_1_q8_1>},
    TypeTraits{DType::Q8_0, dequantize_row_q8_0, quantize_row_q8_0, quantize_row_q8_0,
               vec_dot_q8_0_q8_0, DType::Q8_0, vec_dot_rows_loop<vec_dot_q8_0_q8_0>},
    TypeTraits{DType::Q8_1, dequantize_row_q8_1, quantize_row_q8_1, quantize_row_q8_1,
               vec_dot_q8_1_q8_1, DType::Q8_1, vec_dot_rows_loop<vec_dot_q8_1_q8_1>},
    TypeTraits{DType::Q2_K, dequantize_row_q2_k, quantize_row_q2_k, quantize_row_q2_k,
               vec_dot_q2_k_q8_k, DType::Q8_K, vec_dot_rows_loop<vec_dot_q2_k_q8_k>},
    TypeTraits{DType::Q3_K, dequantize_row_q3_k, quantize_row_q3_k, quantize_row_q3_k,
               vec_dot_q3_k_q8_k, DType::Q8_K, vec_dot_rows_loop<vec_dot_q3_k_q8_k>},
    TypeTraits{DType::Q4_K, dequantize_row_q4_k, quantize_row_q4_k, quantize_row_q4_k,
               vec_dot_q4_k_q8_k, DType::Q8_K, vec_dot_rows_loop<vec_dot_q4_k_q8_k>},
    TypeTraits{DType::Q5_K, dequantize_row_q5_k, quantize_row_q5_k, quantize_row_q5_k,
               vec_dot_q5_k_q8_k, DType::Q8_K, vec_dot_rows_loop<vec_dot_q5_k_q8_k>},
    TypeTraits{DType::Q6_K, dequantize_row_q6_k, quantize_row_q6_k, quantize_row_q6_k,
               vec_dot_q6_k_q8_k, DType::Q8_K, vec_dot_rows_loop<vec_dot_q6_k_q8_k>},
    TypeTraits{DType::Q8_K, dequantize_row_q8_k, quantize_row_q8_k, quantize_row_q8_k,
               vec_dot_q8_k_q8_k, DType::Q8_K, vec_dot_rows_loop<vec_dot_q8_k_q8_k>},
    TypeTraits{DType::Q4_0_G8, dequantize_row_q4_0_g8, quantize_row_q4_0_g8, quantize_row_q4_0_g8,
               vec_dot_q4_0_g8_q8_0_g8, DType::Q8_0_G8, vec_dot_rows_loop<vec_dot_q4_0_g8_q8_0_g8>},
    TypeTraits{DType::Q8_0_G8W, dequantize_row_q8_0_g8w, quantize_row_q8_0_g8w,
               quantize_row_q8_0_g8w, vec_dot_q8_0_g8w_q8_0_g8, DType::Q8_0_G8,
               vec_dot_rows_loop<vec_dot_q8_0_g8w_q8_0_g8>},
    TypeTraits{DType::Q8_0_G8, dequantize_row_q8_0_g8, quantize_row_q8_0_g8, quantize_row_q8_0_g8,
               vec_dot_q8_0_g8_q8_0_g8, DType::Q8_0_G8, vec_dot_rows_loop<vec_dot_q8_0_g8_q8_0_g8>},
    TypeTraits{DType::Q4_K_LANE, dequantize_row_q4_k_lane, quantize_row_q4_k_lane,
               quantize_row_q4_k_lane, vec_dot_q4_k_lane_q8_k_lane, DType::Q8_K_LANE,
               vec_dot_rows_loop<vec_dot_q4_k_lane_q8_k_lane>},
    TypeTraits{DType::Q5_K_LANE, dequantize_row_q5_k_lane, quantize_row_q5_k_lane,
               quantize_row_q5_k_lane, vec_dot_q5_k_lane_q8_k_lane, DType::Q8_K_LANE,
               vec_dot_rows_loop<vec_dot_q5_k_lane_q8_k_lane>},
    TypeTraits{DType::Q6_K_LANE, dequantize_row_q6_k_lane, quantize_row_q6_k_lane,
               quantize_row_q6_k_lane, vec_dot_q6_k_lane_q8_k_lane, DType::Q8_K_LANE,
               vec_dot_rows_loop<vec_dot_q6_k_lane_q8_k_lane>},
    TypeTraits{DType::Q8_K_LANE, dequantize_row_q8_k_lane, quantize_row_q8_k_lane,
               quantize_row_q8_k_lane, vec_dot_q8_k_lane_q8_k_lane, DType::Q8_K_LANE,
               vec_dot_rows_loop<vec_dot_q8_k_lane_q8_k_lane>},
};

using Table = std::array<TypeTraits, kTraits.size()>;

// Tables per ISA, each built from the one below it: scalar -> + AVX2 -> + AVX-512.
const std::array<Table, 3>& tables() {
    static const std::array<Table, 3> t = [] {
        std::array<Table, 3> out{kTraits, kTraits, kTraits};
        // The scalar loop over vec_dot must not outlive an accelerated vec_dot: an ISA table
        // without its own multi-row kernel for a type gets a null vec_dot_rows (callers loop
        // over the row's vec_dot), set before registration so a registered kernel wins.
        for (Table* t : {&out[1], &out[2]})
            for (TypeTraits& row : *t) row.vec_dot_rows = nullptr;
        if (isa_supported(Isa::Avx2)) {
            register_avx2_kernels(out[1].data(), static_cast<int>(out[1].size()));
            out[2] = out[1];
        }
        if (isa_supported(Isa::Avx512))
            register_avx512_kernels(out[2].data(), static_cast<int>(out[2].size()));
        return out;
    }();
    return t;
}

const TypeTraits* find_traits(DType t, Isa isa) {
    for (const auto& row : tables()[static_cast<int>(isa)])
        if (row.type == t) return &row;
    return nullptr;
}

}  // namespace

FromFloatImatrixFn imatrix_quantizer(DType t) {
    return t == DType::Q2_K ? quantize_row_q2_k_imatrix_ref_search : ggml_imatrix_quantizer(t);
}

void quantize_q8_0_with_scale(const float* src, void* dst, int64_t n, float d) {
    quantize_row_q8_0_scaled(src, dst, n, d);
}

FromFloatImatrixFn ggml_imatrix_quantizer(DType t) {
    switch (t) {
        case DType::Q4_0:
            return quantize_row_q4_0_imatrix;
        case DType::Q4_1:
            return quantize_row_q4_1_imatrix;
        case DType::Q5_0:
            return quantize_row_q5_0_imatrix;
        case DType::Q5_1:
            return quantize_row_q5_1_imatrix;
        case DType::Q2_K:
            return quantize_row_q2_k_imatrix;
        case DType::Q3_K:
            return quantize_row_q3_k_imatrix;
        case DType::Q4_K:
            return quantize_row_q4_k_imatrix;
        case DType::Q5_K:
            return quantize_row_q5_k_imatrix;
        case DType::Q6_K:
            return quantize_row_q6_k_imatrix;
        default:
            return nullptr;
    }
}

const TypeTraits& type_traits(DType t) {
    static const Isa isa = active_isa();
    return type_traits(t, isa);
}

const TypeTraits& type_traits(DType t, Isa isa) {
    SYSLM_CHECK(isa_supported(isa), "kernel variant ", isa_name(isa), " is not supported by this CPU");
    const TypeTraits* row = find_traits(t, isa);
    if (!row) {
        const DTypeInfo* info = dtype_info(static_cast<uint32_t>(t));
        if (info) fail("tensor type ", info->name, " has no compute kernels");
        fail("unknown tensor type id ", static_cast<uint32_t>(t));
    }
    return *row;
}

void vec_dot_rows(const TypeTraits& tt, int64_t n, int nr, const void* x, size_t bx,
                  const void* y, float* s) {
    if (tt.vec_dot_rows) {
        tt.vec_dot_rows(n, nr, x, bx, y, s);
        return;
    }
    for (int r = 0; r < nr; ++r) s[r] = tt.vec_dot(n, static_cast<const uint8_t*>(x) + r * bx, y);
}

void vec_dot_tokens(const TypeTraits& tt, int64_t n, int nr, const void* x, size_t bx, int nt,
                    const void* y, size_t by, float* s, size_t bs) {
    // One token takes the multi-row kernel where the type has one (each row is its vec_dot
    // either way): the tokens kernels go row by row.
    if (tt.vec_dot_tokens && (nt > 1 || !tt.vec_dot_rows)) {
        tt.vec_dot_tokens(n, nr, x, bx, nt, y, by, s, bs);
        return;
    }
    for (int t = 0; t < nt; ++t)
        vec_dot_rows(tt, n, nr, x, bx, static_cast<const uint8_t*>(y) + t * by, s + t * bs);
}

bool has_type_traits(DType t) {
    return find_traits(t, Isa::Scalar) != nullptr;
}

}  // namespace syslm::kernels
