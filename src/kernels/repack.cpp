#include "kernels/repack.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu/timing_inputs.hpp"
#include "kernels/isa.hpp"
#include "kernels/kernel_choices.hpp"
#include "kernels/quants/quant_rows.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::kernels {
namespace {

// Times one-token dots of 256 rows of 2048 (in L2, one thread) in `file` and in `lane` order,
// alternating, best of 7 rounds of 16 passes each: a few milliseconds.
KernelChoice measure_lane_order(DType file, DType lane) {
    constexpr int64_t K = 2048, N = 256;
    uint64_t state = 0x9E3779B97F4A7C15ull;
    std::vector<float> w(static_cast<size_t>(N * K)), x(static_cast<size_t>(K));
    fill_timing_values(w, state, 0.02f);
    fill_timing_values(x, state);
    double best[2] = {1e30, 1e30};
    std::vector<float> out(N);
    std::vector<std::vector<uint8_t>> wq(2), xq(2);
    const DType types[2] = {file, lane};
    for (int k = 0; k < 2; ++k) {
        const TypeTraits& tt = type_traits(types[k]);
        wq[k].resize(row_bytes(types[k], K) * N);
        tt.from_float(w.data(), wq[k].data(), N * K);
        xq[k].resize(row_bytes(tt.vec_dot_type, K));
        type_traits(tt.vec_dot_type).from_float(x.data(), xq[k].data(), K);
    }
    for (int round = 0; round < 7; ++round)
        for (int k = 0; k < 2; ++k) {
            const TypeTraits& tt = type_traits(types[k]);
            const auto t0 = std::chrono::steady_clock::now();
            for (int pass = 0; pass < 16; ++pass)
                vec_dot_rows(tt, K, static_cast<int>(N), wq[k].data(), row_bytes(types[k], K),
                             xq[k].data(), out.data());
            best[k] = std::min(
                best[k],
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
    KernelChoice c;
    c.value = best[1] < best[0] ? "lane" : "file";
    char line[128];
    std::snprintf(line, sizeof line,
                  "file order %.1f, lane order %.1f us (1 thread, 256 x 2048, one token)",
                  best[0] / 16 * 1e6, best[1] / 16 * 1e6);
    c.timings = line;
    return c;
}

}  // namespace

DType lane_layout(DType file) {
    switch (file) {
        case DType::Q4_K:
            return DType::Q4_K_LANE;
        case DType::Q5_K:
            return DType::Q5_K_LANE;
        case DType::Q6_K:
            return DType::Q6_K_LANE;
        default:
            return file;
    }
}

const KernelChoice& lane_order_choice(DType file) {
    static const KernelChoice none;
    const DType lane = lane_layout(file);
    if (lane == file || active_isa() == Isa::Scalar) return none;
    static std::mutex mu;
    static std::map<DType, KernelChoice> table;
    const std::lock_guard<std::mutex> lock(mu);
    auto it = table.find(file);
    if (it == table.end())
        it =
            table
                .emplace(file, remembered_kernel_choice(
                                   std::string("lane-order-") + std::string(dtype_name(file)),
                                   [&] { return measure_lane_order(file, lane); },
                                   [](const std::string& v) { return v == "lane" || v == "file"; }))
                .first;
    return it->second;
}

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
    // Lane order where its decode measured faster on this CPU (AVX2: the file order's per
    // sub-block scale broadcasts cost more than the bytes; AVX-512 has its own 512-bit dots).
    if (lane_order_choice(type).value == "lane") return lane_layout(type);
    return type;
}

void repack_rows(DType from, DType to, const void* src, void* dst, int64_t n_in, int64_t n_rows) {
    SYSLM_CHECK(row_bytes(from, n_in) == row_bytes(to, n_in), "repack ", dtype_name(from), " -> ",
                dtype_name(to), ": different row sizes");
    void (*convert)(const void*, void*, int64_t) = nullptr;
    if (from == DType::Q4_0 && to == DType::Q4_0_G8) convert = q4_0_to_g8;
    if (from == DType::Q8_0 && to == DType::Q8_0_G8W) convert = q8_0_to_g8w;
    if (from == DType::Q4_K && to == DType::Q4_K_LANE) convert = q4_k_to_lane;
    if (from == DType::Q5_K && to == DType::Q5_K_LANE) convert = q5_k_to_lane;
    if (from == DType::Q6_K && to == DType::Q6_K_LANE) convert = q6_k_to_lane;
    if (!convert) fail("no load-time repacking from ", dtype_name(from), " to ", dtype_name(to));
    const size_t rb = row_bytes(from, n_in);
    const auto* in = static_cast<const uint8_t*>(src);
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t r = 0; r < n_rows; ++r) convert(in + r * rb, out + r * rb, n_in);
}

}  // namespace syslm::kernels
