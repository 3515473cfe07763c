// Prefill GEMM throughput: y[T][N] = x[T][K] W[N][K]^T on the shapes of the models, in
// GFLOP/s (2 T N K per call), 2 threads unless --threads=N... (SYSLM_BENCH_THREADS). Compares
//   - syslm gemm() per weight type, ISA and panel format (f32 FMA / bf16 vdpbf16ps),
//   - the per-(row, token) vec_dot path it replaces for prefill (matmul_vec_dot),
//   - OpenBLAS sgemm on f32 (its own threads, set to the same count),
//   - the peak loops of kernels/cpu/peak.hpp (FMA f32, vdpbf16ps) on the same threads,
//   - the training GEMMs of a linear layer (forward, input and weight gradient) on every engine
//     the CPU has: OpenBLAS sgemm, f32 panels, bf16 panels, AMX tiles ('Train/').
// Filter with --benchmark_filter, e.g. 'Gemm/F16.*2048x5632'.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/linear_backward.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/peak.hpp"
#include "kernels/type_traits.hpp"

#ifdef SYSLM_BENCH_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

namespace syslm::kernels {
namespace {

int bench_threads() {
    const char* env = std::getenv("SYSLM_BENCH_THREADS");
    return env ? std::atoi(env) : 2;
}

ThreadPool& pool() {
    static ThreadPool p(bench_threads());
    return p;
}

struct Shape {
    const char* name;
    int64_t K, N, T;
};
// L1B: attention (dim x dim), FFN up/gate (dim -> FFN), FFN down; L110M: FFN up and the output
// projection. T = 512 (pp512); T = 64 for a short prompt.
const Shape kShapes[] = {
    {"L1B_2048x2048_T512", 2048, 2048, 512},   {"L1B_2048x5632_T512", 2048, 5632, 512},
    {"L1B_5632x2048_T512", 5632, 2048, 512},   {"L110M_768x2048_T512", 768, 2048, 512},
    {"L110M_768x32000_T512", 768, 32000, 512}, {"L1B_2048x2048_T64", 2048, 2048, 64},
    {"L1B_2048x2048_T16", 2048, 2048, 16},
};

std::vector<float> noise(size_t n, uint32_t seed) {
    std::vector<float> v(n);
    uint32_t s = seed;
    for (auto& f : v) {
        s = s * 1664525u + 1013904223u;
        f = static_cast<float>(static_cast<int32_t>(s >> 8) - (1 << 23)) * (1.0f / (1 << 23)) *
            0.05f;
    }
    return v;
}

struct Operands {
    std::vector<uint8_t> w;
    std::vector<float> x, y;
    WeightView view;
};

Operands make(DType type, const Shape& s) {
    Operands o;
    const std::vector<float> wf = noise(static_cast<size_t>(s.N * s.K), 1);
    const size_t rb = row_bytes(type, s.K);
    o.w.resize(rb * static_cast<size_t>(s.N));
    const TypeTraits& tt = type_traits(type);
    for (int64_t r = 0; r < s.N; ++r) tt.from_float(wf.data() + r * s.K, o.w.data() + r * rb, s.K);
    o.x = noise(static_cast<size_t>(s.T * s.K), 2);
    o.y.resize(static_cast<size_t>(s.T * s.N));
    o.view = WeightView{type, s.K, s.N, o.w.data()};
    return o;
}

void set_flops(benchmark::State& st, const Shape& s) {
    st.counters["GFLOP/s"] = benchmark::Counter(2.0 * s.T * s.N * s.K * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void bm_gemm(benchmark::State& st, DType type, Shape s, Isa isa, GemmPanel panel) {
    Operands o = make(type, s);
    for (auto _ : st) gemm(o.view, o.x.data(), s.T, o.y.data(), pool(), nullptr, isa, panel);
    set_flops(st, s);
}

void bm_vec_dot(benchmark::State& st, DType type, Shape s) {
    Operands o = make(type, s);
    for (auto _ : st) matmul_vec_dot(o.view, o.x.data(), s.T, o.y.data(), pool());
    set_flops(st, s);
}

#ifdef SYSLM_BENCH_OPENBLAS
void bm_openblas(benchmark::State& st, Shape s) {
    openblas_set_num_threads(bench_threads());
    Operands o = make(DType::F32, s);
    const auto* w = reinterpret_cast<const float*>(o.w.data());
    for (auto _ : st)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(s.T),
                    static_cast<int>(s.N), static_cast<int>(s.K), 1.0f, o.x.data(),
                    static_cast<int>(s.K), w, static_cast<int>(s.K), 0.0f, o.y.data(),
                    static_cast<int>(s.N));
    set_flops(st, s);
}
#endif

// The three GEMMs of a linear layer's training step (forward Y = X W^T, input gradient
// dX = dY W, weight gradient dW += dY^T X) on (T x K) activations and an (N x K) weight: syslm's
// bf16 training GEMM (operands read in place, transposed where needed) against OpenBLAS sgemm.
enum class TrainOp { Forward, Input, Weight };
const Shape kTrainShapes[] = {
    {"small_384x1536_T2048", 384, 1536, 2048},
    {"small_384x8192_T2048", 384, 8192, 2048},
    {"gpt2_768x3072_T256", 768, 3072, 256},
};

void bm_train(benchmark::State& st, Shape s, TrainOp op, TrainGemm g) {
    const std::vector<float> x = noise(static_cast<size_t>(s.T * s.K), 2);
    const std::vector<float> w = noise(static_cast<size_t>(s.N * s.K), 1);
    const std::vector<float> dy = noise(static_cast<size_t>(s.T * s.N), 3);
    std::vector<float> out(static_cast<size_t>(std::max(s.T * s.N, std::max(s.T, s.N) * s.K)));
    for (auto _ : st) {
        if (op == TrainOp::Forward)
            train_gemm(g, {x.data(), s.K, false}, {w.data(), s.K, false}, s.T, s.N, s.K,
                       out.data(), false, pool());
        else if (op == TrainOp::Input)
            train_gemm(g, {dy.data(), s.N, false}, {w.data(), s.K, true}, s.T, s.K, s.N,
                       out.data(), false, pool());
        else
            train_gemm(g, {dy.data(), s.N, true}, {x.data(), s.K, true}, s.N, s.K, s.T,
                       out.data(), true, pool());
    }
    set_flops(st, s);
}

void bm_peak(benchmark::State& st, bool bf16) {
    const PeakKernels& pk = peak_kernels();
    const PeakKernels::ComputeFn fn = bf16 ? pk.dot_bf16 : pk.fma_f32;
    if (!fn) {
        st.SkipWithError("no such instruction on this CPU");
        return;
    }
    constexpr int64_t kIters = 1 << 22;
    double ops = 0;
    for (auto _ : st) {
        std::vector<double> per(static_cast<size_t>(pool().size()));
        pool().parallel_for(pool().size(), [&](int64_t b, int64_t e, int) {
            float sink;
            for (int64_t i = b; i < e; ++i) per[static_cast<size_t>(i)] = fn(kIters, &sink);
        });
        for (double d : per) ops += d;
    }
    st.counters["GFLOP/s"] = benchmark::Counter(ops * 1e-9, benchmark::Counter::kIsRate);
}

const int kRegistered = [] {
    benchmark::RegisterBenchmark("Peak/fma_f32", bm_peak, false)->UseRealTime();
    benchmark::RegisterBenchmark("Peak/dot_bf16", bm_peak, true)->UseRealTime();
    for (const Shape& s : kTrainShapes)
        for (const auto& [op, opname] : {std::pair{TrainOp::Forward, "forward"},
                                         {TrainOp::Input, "input_grad"},
                                         {TrainOp::Weight, "weight_grad"}})
            for (const TrainGemm g : {TrainGemm::Blas, TrainGemm::F32Panels,
                                      TrainGemm::BF16Panels, TrainGemm::AmxBF16}) {
                if (!train_gemm_available(g)) continue;
                const std::string name = std::string("Train/") + train_gemm_name(g) + "/" +
                                         opname + "/" + s.name;
                benchmark::RegisterBenchmark(name.c_str(), bm_train, s, op, g)
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond);
            }
    const DType types[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                           DType::Q4_0, DType::Q4_K, DType::Q6_K};
    for (const Shape& s : kShapes) {
#ifdef SYSLM_BENCH_OPENBLAS
        benchmark::RegisterBenchmark((std::string("OpenBLAS/F32/") + s.name).c_str(), bm_openblas,
                                     s)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
#endif
        for (DType t : types) {
            const std::string tn(dtype_info(t).name);
            for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
                if (!isa_supported(isa)) continue;
                for (GemmPanel p : {GemmPanel::F32, GemmPanel::BF16}) {
                    if (p == GemmPanel::BF16 && !gemm_kernels(isa).tile_bf16) continue;
                    const std::string name = "Gemm/" + tn + "/" + isa_name(isa) + "/" +
                                             gemm_panel_name(p) + "/" + s.name;
                    benchmark::RegisterBenchmark(name.c_str(), bm_gemm, t, s, isa, p)
                        ->UseRealTime()
                        ->Unit(benchmark::kMillisecond);
                }
            }
            benchmark::RegisterBenchmark(("VecDot/" + tn + "/" + s.name).c_str(), bm_vec_dot, t, s)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        }
    }
    return 0;
}();

}  // namespace
}  // namespace syslm::kernels

BENCHMARK_MAIN();
