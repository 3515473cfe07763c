#include "kernels/cpu/gemm.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "core/cpu_features.hpp"
#include "core/error.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/scratch.hpp"
#include "kernels/cpu/timing_inputs.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::kernels {
namespace {

// Depth of a packed block: a multiple of every block size (QK_K = 256), so quantized rows are
// dequantized in whole blocks, and short enough that an activation micro-panel (kKc x mr) stays
// in L1 while the weight block streams from L2.
constexpr int64_t kKc = 256;
// Weight rows per packed block: kKc x kNc f32 = 128 KiB, well inside a core's L2.
constexpr int64_t kNc = 128;

// Activations packed per token block of mr: [block][k][mr] floats, or [block][k2][mr] bf16
// pairs, zero-padded past the last token and (pairs) past K.
void pack_activations(const GemmKernels& kn, bool bf16, const float* x, int64_t T, int64_t K,
                      int mr, void* dst, ThreadPool& pool) {
    const int64_t blocks = (T + mr - 1) / mr, K2 = (K + 1) / 2;
    pool.parallel_for(blocks, [&](int64_t b, int64_t e, int) {
        for (int64_t tb = b; tb < e; ++tb) {
            const int m = static_cast<int>(std::min<int64_t>(mr, T - tb * mr));
            if (bf16)
                kn.pack_a_bf16(x + tb * mr * K, K, m, K,
                               static_cast<uint32_t*>(dst) + tb * K2 * mr);
            else
                kn.pack_a_f32(x + tb * mr * K, K, m, K, static_cast<float*>(dst) + tb * K * mr);
        }
    });
}

// The blocked sweep shared by every entry point. Each thread owns a contiguous run of nr-row
// panels (the pool splits [0, panels) evenly), packs its own weights once per (kc x nc) block
// with pack_weights(jc, nc, pc, kc, bpack, rows) and sweeps all tokens (packed in `a`) over
// them: no weight is converted twice and both threads get the same number of panels, give or
// take one.
template <typename PackWeights>
void sweep(const GemmKernels& kn, bool bf16, int64_t T, int64_t N, int64_t K, const void* a,
           PackWeights&& pack_weights, float* y, const float* bias, bool accumulate,
           ThreadPool& pool) {
    const int mr = bf16 ? kn.mr_bf16 : kn.mr_f32;
    const int nr = bf16 ? kn.nr_bf16 : kn.nr_f32;
    const int64_t K2 = (K + 1) / 2;
    const int64_t token_blocks = (T + mr - 1) / mr;
    const auto* a_f32 = static_cast<const float*>(a);
    const auto* a_bf16 = static_cast<const uint32_t*>(a);
    const int64_t panels = (N + nr - 1) / nr;
    const int64_t nc_max = std::max<int64_t>(kNc / nr, 1) * nr;
    pool.parallel_for(panels, [&](int64_t pb, int64_t pe, int) {
        thread_local Scratch b_scratch, rows_scratch;
        const int64_t kc_pad = (kKc + 1) / 2 * 2;
        std::byte* bpack = b_scratch.get<std::byte>(static_cast<size_t>(nc_max * kc_pad) * 4);
        float* rows = rows_scratch.get<float>(static_cast<size_t>(nc_max * kKc));
        const int64_t r_end = std::min(N, pe * nr);
        for (int64_t jc = pb * nr; jc < r_end; jc += nc_max) {
            const int64_t nc = std::min(nc_max, r_end - jc);
            for (int64_t pc = 0; pc < K; pc += kKc) {
                const int64_t kc = std::min(kKc, K - pc);
                pack_weights(jc, nc, pc, kc, bpack, rows);
                const bool acc = accumulate || pc > 0;
                const int64_t kc2 = (kc + 1) / 2;
                for (int64_t tb = 0; tb < token_blocks; ++tb) {
                    const int m = static_cast<int>(std::min<int64_t>(mr, T - tb * mr));
                    float* yt = y + tb * mr * N;
                    for (int64_t p = 0; p * nr < nc; ++p) {
                        const int n = static_cast<int>(std::min<int64_t>(nr, nc - p * nr));
                        const int64_t o = jc + p * nr;
                        const float* b = bias && pc == 0 ? bias + o : nullptr;
                        if (bf16) {
                            kn.tile_bf16(
                                kc2, a_bf16 + tb * K2 * mr + pc / 2 * mr,
                                reinterpret_cast<const uint16_t*>(bpack) + p * kc2 * 2 * nr, yt + o,
                                N, m, n, b, acc);
                        } else {
                            kn.tile_f32(kc, a_f32 + tb * K * mr + pc * mr,
                                        reinterpret_cast<const float*>(bpack) + p * kc * nr, yt + o,
                                        N, m, n, b, acc);
                        }
                    }
                }
            }
        }
    });
}

}  // namespace

const char* gemm_panel_name(GemmPanel p) {
    switch (p) {
        case GemmPanel::None:
            return "none";
        case GemmPanel::F32:
            return "f32";
        case GemmPanel::BF16:
            return "bf16";
        case GemmPanel::AmxBF16:
            return "amx-bf16";
    }
    return "?";
}

const GemmKernels& gemm_kernels(Isa isa) {
    static const std::array<GemmKernels, 3> tables = [] {
        std::array<GemmKernels, 3> t{};
        t[0].isa = Isa::Scalar;
        if (isa_supported(Isa::Avx2)) t[1] = x86::gemm_kernels_avx2();
        if (isa_supported(Isa::Avx512)) t[2] = x86::gemm_kernels_avx512(cpu_features().avx512bf16);
        return t;
    }();
    if (!isa_supported(isa)) fail("GEMM: this CPU does not support ISA ", isa_name(isa));
    return tables[static_cast<int>(isa)];
}

GemmPanel gemm_panel(DType type, Isa isa) {
    const GemmKernels& k = gemm_kernels(isa);
    if (!k.tile_f32 || !has_type_traits(type)) return GemmPanel::None;
    // F32 weights (trained models, training itself) keep exact f32 panels. F16 weights too,
    // except on the AMX tiles, whose several times higher throughput is worth rounding them to
    // bf16 as the quantized types are (the policy and its measured KL: docs/design/amx.md);
    // the BF16 dot-product panels would lose the same bits for less speed.
    if (type == DType::F32) return GemmPanel::F32;
    const GemmPanel chosen = gemm_panel_choice(isa).panel;
    if (type == DType::F16) return chosen == GemmPanel::AmxBF16 ? chosen : GemmPanel::F32;
    return chosen;
}

bool amx_bf16_available() {
    return isa_supported(Isa::Avx512) && cpu_features().avx512bf16 && cpu_features().amx_bf16 &&
           amx_tiles_permitted();
}

namespace {

bool panel_available(GemmPanel p, Isa isa) {
    const GemmKernels& k = gemm_kernels(isa);
    switch (p) {
        case GemmPanel::F32:
            return k.tile_f32 != nullptr;
        case GemmPanel::BF16:
            return k.tile_bf16 != nullptr;
        case GemmPanel::AmxBF16:
            return isa == Isa::Avx512 && amx_bf16_available();
        case GemmPanel::None:
            break;
    }
    return false;
}

// Seconds of the fastest of three runs of a prefill-shaped GEMM (64 tokens, a 1024 x 512 Q8_0
// matrix of weight-like values) with panel p: about a millisecond each.
double time_panel(GemmPanel p, Isa isa) {
    constexpr int64_t K = 1024, N = 512, T = 64;
    static const std::vector<uint8_t> wq = [] {
        std::vector<float> wf(static_cast<size_t>(N * K));
        uint64_t s = 12345;
        fill_timing_values(wf, s, 0.02f);
        std::vector<uint8_t> q(row_bytes(DType::Q8_0, K) * N);
        type_traits(DType::Q8_0, Isa::Scalar).from_float(wf.data(), q.data(), N * K);
        return q;
    }();
    std::vector<float> x(static_cast<size_t>(T * K)), y(static_cast<size_t>(T * N));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f - static_cast<float>((i * 7919) % 1000) / 1000;
    const WeightView w{DType::Q8_0, K, N, wq.data()};
    ThreadPool pool(1);
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        gemm(w, x.data(), T, y.data(), pool, nullptr, isa, p);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

PanelChoice choose_panel(Isa isa) {
    PanelChoice c;
    if (const char* env = std::getenv("SYSLM_GEMM_PANEL"); env && *env) {
        const std::string want = env;
        for (GemmPanel p : {GemmPanel::F32, GemmPanel::BF16, GemmPanel::AmxBF16})
            if (want == gemm_panel_name(p)) {
                if (!panel_available(p, isa))
                    fail("SYSLM_GEMM_PANEL=", want, ": not available on this CPU with ",
                         isa_name(isa));
                c.panel = p;
                return c;
            }
        fail("SYSLM_GEMM_PANEL='", want, "': expected f32, bf16 or amx-bf16");
    }
    std::vector<GemmPanel> candidates;
    for (GemmPanel p : {GemmPanel::F32, GemmPanel::BF16, GemmPanel::AmxBF16})
        if (panel_available(p, isa)) candidates.push_back(p);
    if (candidates.size() < 2) {
        if (!candidates.empty()) c.panel = candidates[0];
        return c;
    }
    auto by_name = [&](const std::string& name) {
        for (GemmPanel p : candidates)
            if (name == gemm_panel_name(p)) return p;
        return GemmPanel::None;
    };
    c.record = remembered_kernel_choice(
        std::string("gemm-panel-") + isa_name(isa),
        [&] {
            KernelChoice m;
            double best = 0;
            for (GemmPanel p : candidates) {
                const double gflops = 2.0 * 64 * 1024 * 512 / time_panel(p, isa) * 1e-9;
                c.timings.push_back({p, gflops});
                m.timings += std::string(m.timings.empty() ? "" : ", ") + gemm_panel_name(p) +
                             " " + std::to_string(static_cast<int>(gflops)) + " GFLOP/s";
                if (gflops > best) {
                    best = gflops;
                    m.value = gemm_panel_name(p);
                }
            }
            m.timings += " (1 thread)";
            return m;
        },
        [&](const std::string& v) { return by_name(v) != GemmPanel::None; });
    c.panel = by_name(c.record.value);
    return c;
}

}  // namespace

const PanelChoice& gemm_panel_choice(Isa isa) {
    static std::once_flag once[3];
    static PanelChoice choice[3];
    const int i = static_cast<int>(isa);
    std::call_once(once[i], [&] { choice[i] = choose_panel(isa); });
    return choice[i];
}

void gemm(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
          const float* bias, Isa isa, GemmPanel panel) {
    if (panel == GemmPanel::AmxBF16) {
        if (!panel_available(panel, isa))
            fail("GEMM: no amx-bf16 panels for ISA ", isa_name(isa), " on this CPU");
        return x86::gemm_amx_bf16(w, x, n_tokens, y, pool, bias);
    }
    const GemmKernels& kn = gemm_kernels(isa);
    const bool bf16 = panel == GemmPanel::BF16;
    if (panel == GemmPanel::None || (bf16 ? !kn.tile_bf16 : !kn.tile_f32))
        fail("GEMM: no ", gemm_panel_name(panel), " panels for ISA ", isa_name(isa));
    const TypeTraits& tt = type_traits(w.type, isa);
    const int64_t K = w.n_in, N = w.n_out, T = n_tokens;
    if (T <= 0 || N <= 0) return;
    const int mr = bf16 ? kn.mr_bf16 : kn.mr_f32;
    const int64_t K2 = (K + 1) / 2;
    const int64_t token_blocks = (T + mr - 1) / mr;

    thread_local Scratch a_scratch;
    float* a_f32 = nullptr;
    uint32_t* a_bf16 = nullptr;
    if (bf16)
        a_bf16 = a_scratch.get<uint32_t>(static_cast<size_t>(token_blocks * K2 * mr));
    else
        a_f32 = a_scratch.get<float>(static_cast<size_t>(token_blocks * K * mr));
    pack_activations(kn, bf16, x, T, K, mr, bf16 ? static_cast<void*>(a_bf16) : a_f32, pool);

    const size_t w_row = row_bytes(w.type, w.n_in);
    const auto* w_bytes = static_cast<const uint8_t*>(w.data);
    const int64_t blck = dtype_info(w.type).block_size;
    const size_t blck_bytes = dtype_info(w.type).type_size;
    // Weight rows [jc, jc + nc) x [pc, pc + kc) to panels in bpack, converted on the fly; types
    // without a direct packer go through to_float into `rows` first (kKc is a multiple of every
    // block size, so pc starts a block).
    const auto pack_weights = [&](int64_t jc, int64_t nc, int64_t pc, int64_t kc, std::byte* bpack,
                                  float* rows) {
        const auto* f32 = reinterpret_cast<const float*>(w_bytes) + jc * K + pc;
        const auto* u16 = reinterpret_cast<const uint16_t*>(w_bytes) + jc * K + pc;
        auto* b_f32 = reinterpret_cast<float*>(bpack);
        auto* b_bf16 = reinterpret_cast<uint16_t*>(bpack);
        if (!bf16 && w.type == DType::F32) return kn.pack_f32(f32, K, nc, kc, b_f32);
        if (!bf16 && w.type == DType::F16) return kn.pack_f32_from_f16(u16, K, nc, kc, b_f32);
        if (bf16 && w.type == DType::BF16) return kn.pack_bf16(u16, K, nc, kc, b_bf16);
        const size_t offset = static_cast<size_t>(pc / blck) * blck_bytes;
        for (int64_t r = 0; r < nc; ++r)
            tt.to_float(w_bytes + (jc + r) * w_row + offset, rows + r * kc, kc);
        if (bf16)
            kn.pack_bf16_from_f32(rows, kc, nc, kc, b_bf16);
        else
            kn.pack_f32(rows, kc, nc, kc, b_f32);
    };

    sweep(kn, bf16, T, N, K, bf16 ? static_cast<const void*>(a_bf16) : a_f32, pack_weights, y,
          bias, false, pool);
}

bool gemm_bf16_supported() {
    return isa_supported(Isa::Avx512) && gemm_kernels(Isa::Avx512).pack_a_bf16_t != nullptr;
}

void gemm_bf16(GemmOperand x, GemmOperand w, int64_t T, int64_t N, int64_t K, float* y,
               bool accumulate, ThreadPool& pool, const float* bias) {
    if (!gemm_bf16_supported()) fail("GEMM: bf16 panels need AVX512_BF16, which this CPU lacks");
    if (T <= 0 || N <= 0) return;
    const GemmKernels& kn = gemm_kernels(Isa::Avx512);
    const int mr = kn.mr_bf16;
    const int64_t K2 = (K + 1) / 2, blocks = (T + mr - 1) / mr;
    thread_local Scratch a_scratch;
    uint32_t* a = a_scratch.get<uint32_t>(static_cast<size_t>(blocks * K2 * mr));
    pool.parallel_for(blocks, [&](int64_t b, int64_t e, int) {
        if (!x.transposed) {
            for (int64_t tb = b; tb < e; ++tb) {
                const int m = static_cast<int>(std::min<int64_t>(mr, T - tb * mr));
                kn.pack_a_bf16(x.data + tb * mr * x.ld, x.ld, m, K, a + tb * K2 * mr);
            }
            return;
        }
        // Transposed: a token block is a short piece of every depth row, so blocks go in groups
        // over chunks of depth rows: each row's cache lines are used whole while in L1.
        constexpr int64_t kGroup = 8, kDepth = 64;
        for (int64_t g = b; g < e; g += kGroup)
            for (int64_t k0 = 0; k0 < K; k0 += kDepth)
                for (int64_t tb = g; tb < std::min(e, g + kGroup); ++tb) {
                    const int m = static_cast<int>(std::min<int64_t>(mr, T - tb * mr));
                    kn.pack_a_bf16_t(x.data + k0 * x.ld + tb * mr, x.ld, m,
                                     std::min(kDepth, K - k0), a + tb * K2 * mr + k0 / 2 * mr);
                }
    });
    const auto pack_weights = [&](int64_t jc, int64_t nc, int64_t pc, int64_t kc,
                                  std::byte* bpack, float*) {
        auto* dst = reinterpret_cast<uint16_t*>(bpack);
        if (w.transposed)
            kn.pack_bf16_from_f32_t(w.data + pc * w.ld + jc, w.ld, nc, kc, dst);
        else
            kn.pack_bf16_from_f32(w.data + jc * w.ld + pc, w.ld, nc, kc, dst);
    };
    sweep(kn, true, T, N, K, a, pack_weights, y, bias, accumulate, pool);
}

void gemm_amx_bf16_operands(GemmOperand x, GemmOperand w, int64_t T, int64_t N, int64_t K,
                            float* y, bool accumulate, ThreadPool& pool, const float* bias) {
    if (!amx_bf16_available()) fail("GEMM: the AMX bf16 tiles are not available on this CPU");
    x86::gemm_amx_bf16_operands(x, w, T, N, K, y, accumulate, pool, bias);
}

namespace {

Isa f32_gemm_isa() {
    return isa_supported(Isa::Avx512) ? Isa::Avx512 : Isa::Avx2;
}

}  // namespace

bool gemm_f32_supported() {
    return isa_supported(Isa::Avx2);
}

void gemm_f32(GemmOperand x, GemmOperand w, int64_t T, int64_t N, int64_t K, float* y,
              bool accumulate, ThreadPool& pool, const float* bias) {
    if (!gemm_f32_supported()) fail("GEMM: f32 panels need AVX2, which this CPU lacks");
    if (T <= 0 || N <= 0) return;
    const GemmKernels& kn = gemm_kernels(f32_gemm_isa());
    const int mr = kn.mr_f32, nr = kn.nr_f32;
    const int64_t blocks = (T + mr - 1) / mr;
    thread_local Scratch a_scratch;
    float* a = a_scratch.get<float>(static_cast<size_t>(blocks * K * mr));
    pool.parallel_for(blocks, [&](int64_t b, int64_t e, int) {
        for (int64_t tb = b; tb < e; ++tb) {
            const int m = static_cast<int>(std::min<int64_t>(mr, T - tb * mr));
            float* dst = a + tb * K * mr;
            if (!x.transposed) {
                kn.pack_a_f32(x.data + tb * mr * x.ld, x.ld, m, K, dst);
                continue;
            }
            // Transposed: the block's tokens are contiguous in each depth row.
            const float* src = x.data + tb * mr;
            for (int64_t k = 0; k < K; ++k) {
                std::memcpy(dst + k * mr, src + k * x.ld, static_cast<size_t>(m) * 4);
                std::fill(dst + k * mr + m, dst + (k + 1) * mr, 0.0f);
            }
        }
    });
    const auto pack_weights = [&](int64_t jc, int64_t nc, int64_t pc, int64_t kc,
                                  std::byte* bpack, float*) {
        auto* dst = reinterpret_cast<float*>(bpack);
        if (!w.transposed) return kn.pack_f32(w.data + jc * w.ld + pc, w.ld, nc, kc, dst);
        // Transposed: a panel's rows are contiguous in each depth row of the source.
        for (int64_t r0 = 0; r0 < nc; r0 += nr, dst += kc * nr) {
            const int64_t n = std::min<int64_t>(nr, nc - r0);
            for (int64_t k = 0; k < kc; ++k) {
                std::memcpy(dst + k * nr, w.data + (pc + k) * w.ld + jc + r0,
                            static_cast<size_t>(n) * 4);
                std::fill(dst + k * nr + n, dst + (k + 1) * nr, 0.0f);
            }
        }
    };
    sweep(kn, false, T, N, K, a, pack_weights, y, bias, accumulate, pool);
}

}  // namespace syslm::kernels
