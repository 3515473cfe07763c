#include "kernels/cpu/linear_backward.hpp"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <initializer_list>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/timing_inputs.hpp"

namespace syslm::kernels {
namespace {

// OpenBLAS runs its own threads; as many as the pool has, while the pool's workers wait.
void use_threads(const ThreadPool& pool) {
    openblas_set_num_threads(pool.size());
}

int blas_int(int64_t v) {
    return static_cast<int>(v);  // model dimensions: far below 2^31
}

// db += column sums of dy, in double: columns in chunks of 64 per job, rows streamed in order
// (each row's chunk is contiguous and vectorises; the old column-by-column walk strode N floats).
void bias_backward(const float* dy, int64_t T, int64_t N, float* db, ThreadPool& pool) {
    constexpr int64_t kChunk = 64;
    pool.parallel_for((N + kChunk - 1) / kChunk, [&](int64_t b, int64_t e, int) {
        for (int64_t c = b; c < e; ++c) {
            const int64_t n0 = c * kChunk, nn = std::min(kChunk, N - n0);
            double acc[kChunk] = {};
            for (int64_t t = 0; t < T; ++t) {
                const float* row = dy + t * N + n0;
                for (int64_t i = 0; i < nn; ++i) acc[i] += row[i];
            }
            for (int64_t i = 0; i < nn; ++i) db[n0 + i] += static_cast<float>(acc[i]);
        }
    });
}

}  // namespace

bool train_gemm_available(TrainGemm g) {
    switch (g) {
        case TrainGemm::Blas:
            return true;
        case TrainGemm::F32Panels:
            return gemm_f32_supported();
        case TrainGemm::BF16Panels:
            return gemm_bf16_supported();
        case TrainGemm::AmxBF16:
            return amx_bf16_available();
        case TrainGemm::None:
            break;
    }
    return false;
}

void train_gemm(TrainGemm g, GemmOperand x, GemmOperand w, int64_t T, int64_t N, int64_t K,
                float* y, bool accumulate, ThreadPool& pool, const float* bias) {
    switch (g) {
        case TrainGemm::F32Panels:
            return gemm_f32(x, w, T, N, K, y, accumulate, pool, bias);
        case TrainGemm::BF16Panels:
            return gemm_bf16(x, w, T, N, K, y, accumulate, pool, bias);
        case TrainGemm::AmxBF16:
            return gemm_amx_bf16_operands(x, w, T, N, K, y, accumulate, pool, bias);
        case TrainGemm::None:
            fail("training GEMM: no engine");
        case TrainGemm::Blas:
            break;
    }
    use_threads(pool);
    // Row-major op(A) = x (T x K), op(B) = w^T (K x N).
    cblas_sgemm(CblasRowMajor, x.transposed ? CblasTrans : CblasNoTrans,
                w.transposed ? CblasNoTrans : CblasTrans, blas_int(T), blas_int(N), blas_int(K),
                1.0f, x.data, blas_int(x.ld), w.data, blas_int(w.ld), accumulate ? 1.0f : 0.0f, y,
                blas_int(N));
    if (bias)
        pool.parallel_for(T, [&](int64_t b, int64_t e, int) {
            for (int64_t t = b; t < e; ++t)
                for (int64_t n = 0; n < N; ++n) y[t * N + n] += bias[n];
        });
}

namespace {

// GFLOP/s of each engine on one thread over a linear layer's three GEMMs (forward, input and
// weight gradient) of awkward size: five rounds, the engines in turn within a round, the best
// round of each. The engines change the losses in their last bits, so the choice must not flip
// between two runs of one command: interleaved rounds and the best of five keep a slowdown of
// the machine (another process, this one's data thread starting) from landing on one engine.
std::vector<double> time_gemms(const std::vector<TrainGemm>& engines) {
    constexpr int64_t T = 128, K = 512, N = 384;
    std::vector<float> x(T * K), w(N * K), dy(T * N), y(T * N), dx(T * K), dw(N * K);
    uint64_t s = 7;
    for (auto* v : {&x, &w, &dy}) fill_timing_values(*v, s);
    ThreadPool pool(1);
    std::vector<double> best(engines.size(), 1e30);
    for (int round = 0; round < 5; ++round)
        for (size_t i = 0; i < engines.size(); ++i) {
            const TrainGemm g = engines[i];
            const auto t0 = std::chrono::steady_clock::now();
            train_gemm(g, {x.data(), K, false}, {w.data(), K, false}, T, N, K, y.data(), false, pool);
            train_gemm(g, {dy.data(), N, false}, {w.data(), K, true}, T, K, N, dx.data(), false, pool);
            train_gemm(g, {dy.data(), N, true}, {x.data(), K, true}, N, K, T, dw.data(), true, pool);
            best[i] = std::min(best[i], std::chrono::duration<double>(
                                            std::chrono::steady_clock::now() - t0).count());
        }
    std::vector<double> gflops;
    for (double b : best) gflops.push_back(3 * 2.0 * T * K * N / b * 1e-9);
    return gflops;
}

TrainGemm from_env(const char* var, std::initializer_list<TrainGemm> allowed) {
    const char* env = std::getenv(var);
    if (!env || !*env) return TrainGemm::None;
    std::string names;
    for (TrainGemm g : allowed) {
        if (std::string(env) == train_gemm_name(g)) {
            if (!train_gemm_available(g)) fail(var, "=", env, ": not available on this CPU");
            return g;
        }
        names += std::string(names.empty() ? "" : " or ") + train_gemm_name(g);
    }
    fail(var, "='", env, "': expected ", names);
}

// The first candidate unless another times kTrainGemmMargin faster; remembered per machine
// (kernels/kernel_choices.hpp) under `key`.
TrainGemm fastest(const char* key, std::initializer_list<TrainGemm> candidates,
                  TrainGemmChoice& c) {
    std::vector<TrainGemm> have;
    for (TrainGemm g : candidates)
        if (train_gemm_available(g)) have.push_back(g);
    if (have.size() < 2) return have.empty() ? TrainGemm::None : have[0];
    auto by_name = [&](const std::string& name) {
        for (TrainGemm g : have)
            if (name == train_gemm_name(g)) return g;
        return TrainGemm::None;
    };
    KernelChoice k = remembered_kernel_choice(
        key,
        [&] {
            const std::vector<double> gflops = time_gemms(have);
            TrainGemm best = have[0];
            double best_gflops = 0;
            KernelChoice m;
            for (size_t i = 0; i < have.size(); ++i) {
                c.timings.push_back({have[i], gflops[i]});
                m.timings += std::string(i ? ", " : "") + train_gemm_name(have[i]) + " " +
                             std::to_string(static_cast<int>(gflops[i])) + " GFLOP/s";
                if (i == 0 || gflops[i] > kTrainGemmMargin * best_gflops) {
                    best_gflops = gflops[i];
                    best = have[i];
                }
            }
            m.timings += " (1 thread, 128 x 512 x 384 layer, 3 GEMMs)";
            m.value = train_gemm_name(best);
            return m;
        },
        [&](const std::string& v) { return by_name(v) != TrainGemm::None; });
    c.records.push_back(k);
    return by_name(k.value);
}

TrainGemmChoice choose() {
    TrainGemmChoice c;
    c.f32 = from_env("SYSLM_TRAIN_GEMM_F32", {TrainGemm::Blas, TrainGemm::F32Panels});
    if (c.f32 == TrainGemm::None)
        c.f32 = fastest("train-gemm-f32", {TrainGemm::Blas, TrainGemm::F32Panels}, c);
    c.bf16 = from_env("SYSLM_TRAIN_GEMM_BF16", {TrainGemm::BF16Panels, TrainGemm::AmxBF16});
    if (c.bf16 == TrainGemm::None)
        c.bf16 = fastest("train-gemm-bf16", {TrainGemm::BF16Panels, TrainGemm::AmxBF16}, c);
    return c;
}

bool native(Rounding r, bool emulate) {
    return r == Rounding::BF16 && !emulate && train_gemm_choice().bf16 != TrainGemm::None;
}

// The emulated path's operands: a rounded f32 copy in one of two grow-only buffers.
const float* rounded(Rounding r, const float* v, int64_t n, int slot, ThreadPool& pool) {
    thread_local std::vector<float> copies[2];
    std::vector<float>& c = copies[slot];
    if (c.size() < static_cast<size_t>(n)) c.resize(static_cast<size_t>(n));
    float* d = c.data();
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        if (r == Rounding::BF16)
            for (int64_t i = b; i < e; ++i) d[i] = bf16_to_f32(f32_to_bf16(v[i]));
        else
            for (int64_t i = b; i < e; ++i) d[i] = f16_to_f32(f32_to_f16(v[i]));
    });
    return d;
}

}  // namespace

const char* train_gemm_name(TrainGemm g) {
    switch (g) {
        case TrainGemm::None:
            return "none";
        case TrainGemm::Blas:
            return "blas";
        case TrainGemm::F32Panels:
            return "f32";
        case TrainGemm::BF16Panels:
            return "bf16";
        case TrainGemm::AmxBF16:
            return "amx-bf16";
    }
    return "?";
}

namespace {
TrainGemmChoice& current_choice() {
    static TrainGemmChoice c = choose();
    return c;
}
}  // namespace

const TrainGemmChoice& train_gemm_choice() {
    return current_choice();
}

bool pin_train_gemms(TrainGemm f32, TrainGemm bf16) {
    if (f32 != TrainGemm::Blas && f32 != TrainGemm::F32Panels) return false;
    if (bf16 != TrainGemm::None && bf16 != TrainGemm::BF16Panels && bf16 != TrainGemm::AmxBF16)
        return false;
    if (!train_gemm_available(f32) || (bf16 != TrainGemm::None && !train_gemm_available(bf16)))
        return false;
    TrainGemmChoice& c = current_choice();
    c.f32 = f32;
    c.bf16 = bf16;
    return true;
}

double train_gemm_gflops(TrainGemm g) {
    for (const auto& t : train_gemm_choice().timings)
        if (t.gemm == g) return t.gflops;
    static std::mutex mu;
    static std::vector<TrainGemmChoice::Timing> extra;
    const std::lock_guard<std::mutex> lock(mu);
    for (const auto& t : extra)
        if (t.gemm == g) return t.gflops;
    if (!train_gemm_available(g)) fail("training GEMM ", train_gemm_name(g), ": not available");
    extra.push_back({g, time_gemms({g})[0]});
    return extra.back().gflops;
}

void linear_backward_input(const float* dy, const float* w, int64_t T, int64_t K, int64_t N,
                           float* dx, bool accumulate, ThreadPool& pool) {
    train_gemm(train_gemm_choice().f32, {dy, N, false}, {w, K, true}, T, K, N, dx, accumulate, pool);
}

void linear_backward_weight(const float* dy, const float* x, int64_t T, int64_t K, int64_t N,
                            float* dw, float* db, ThreadPool& pool) {
    train_gemm(train_gemm_choice().f32, {dy, N, true}, {x, K, true}, N, K, T, dw, true, pool);
    if (db) bias_backward(dy, T, N, db, pool);
}

void linear_forward_rounded(Rounding r, const float* x, const float* w, const float* bias,
                            int64_t T, int64_t K, int64_t N, float* y, ThreadPool& pool,
                            bool emulate) {
    if (native(r, emulate))
        return train_gemm(train_gemm_choice().bf16, {x, K, false}, {w, K, false}, T, N, K, y, false,
                   pool, bias);
    const float* xr = rounded(r, x, T * K, 0, pool);
    const float* wr = rounded(r, w, N * K, 1, pool);
    train_gemm(train_gemm_choice().f32, {xr, K, false}, {wr, K, false}, T, N, K, y, false, pool, bias);
}

void linear_backward_input_rounded(Rounding r, const float* dy, const float* w, int64_t T,
                                   int64_t K, int64_t N, float* dx, bool accumulate,
                                   ThreadPool& pool, bool emulate) {
    if (native(r, emulate))
        return train_gemm(train_gemm_choice().bf16, {dy, N, false}, {w, K, true}, T, K, N, dx,
                   accumulate, pool);
    linear_backward_input(rounded(r, dy, T * N, 0, pool), rounded(r, w, N * K, 1, pool), T, K, N,
                          dx, accumulate, pool);
}

void linear_backward_weight_rounded(Rounding r, const float* dy, const float* x, int64_t T,
                                    int64_t K, int64_t N, float* dw, float* db, ThreadPool& pool,
                                    bool emulate) {
    if (native(r, emulate)) {
        train_gemm(train_gemm_choice().bf16, {dy, N, true}, {x, K, true}, N, K, T, dw, true, pool);
    } else {
        linear_backward_weight(rounded(r, dy, T * N, 0, pool), rounded(r, x, T * K, 1, pool), T,
                               K, N, dw, nullptr, pool);
    }
    if (db) bias_backward(dy, T, N, db, pool);  // f32: bias gradients are sums, not products
}

}  // namespace syslm::kernels
