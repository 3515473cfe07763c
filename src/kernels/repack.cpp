#include "kernels/repack.hpp"

#include "core/error.hpp"
#include "kernels/isa.hpp"
#include "kernels/quants/quant_rows.hpp"

namespace syslm::kernels {

DType load_layout(DType type, int64_t n_in) {
    // The scalar tier keeps the file layout: it is the reference the others are checked against.
    if (type == DType::Q4_0 && n_in % dtype_info(DType::Q4_0_G8).block_size == 0 &&
        active_isa() != Isa::Scalar)
        return DType::Q4_0_G8;
    // Its kernel is AVX-512 VNNI's vpdpbusd on unsigned weights: AVX2's vpmaddubsw would
    // saturate on them.
    if (type == DType::Q8_0 && n_in % dtype_info(DType::Q8_0_G8W).block_size == 0 &&
        active_isa() == Isa::Avx512)
        return DType::Q8_0_G8W;
    return type;
}

void repack_rows(DType from, DType to, const void* src, void* dst, int64_t n_in, int64_t n_rows) {
    SYSLM_CHECK(row_bytes(from, n_in) == row_bytes(to, n_in), "repack ", dtype_name(from), " -> ",
                dtype_name(to), ": different row sizes");
    void (*convert)(const void*, void*, int64_t) = nullptr;
    if (from == DType::Q4_0 && to == DType::Q4_0_G8) convert = q4_0_to_g8;
    if (from == DType::Q8_0 && to == DType::Q8_0_G8W) convert = q8_0_to_g8w;
    if (!convert) fail("no load-time repacking from ", dtype_name(from), " to ", dtype_name(to));
    const size_t rb = row_bytes(from, n_in);
    const auto* in = static_cast<const uint8_t*>(src);
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t r = 0; r < n_rows; ++r) convert(in + r * rb, out + r * rb, n_in);
}

}  // namespace syslm::kernels
