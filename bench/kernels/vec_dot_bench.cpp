// vec_dot of every tensor type against its partner, per ISA variant and thread count, over a
// weight matrix larger than the last-level cache: the shape of a decode step's matrix-vector
// products, which are memory-bound. The figure that matters is bytes_per_second: weight bytes
// read per second (the activation row stays in L1/L2).
//
//   syslm_vec_dot_bench [--benchmark_filter=Q4_0] [--benchmark_min_time=0.5]
//   SYSLM_BENCH_MB=128 syslm_vec_dot_bench        # matrix size (default 64 MB)
//
// Names: vec_dot/<type>/<isa>/threads:<t>. With 2 threads each thread takes half the rows.
//
// tokens/<type>/<isa>/<kernel>/tokens:<n>: the same dots for n activation rows against 64 weight
// rows of 1024 that stay in L2 (a draft being verified, a few batched sequences: compute, not
// memory, sets the pace), one thread. <kernel> is "alone" (vec_dot_rows once per token) or
// "batched" (vec_dot_tokens, each weight vector loaded once for several tokens). The figure is
// GFLOP/s; the machine's FMA peak is in `syslm probe`.
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/isa.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::kernels {
namespace {

constexpr int64_t kCols = 4096;        // row length: a 4096-wide model's projection
constexpr int64_t kDistinctRows = 32;  // quantized once, then replicated to fill the matrix

// 2 MiB-aligned with transparent huge pages asked for, as the engine's weights
// (model/weights.cpp): with 4 KiB pages the stream would measure the TLB too.
struct HugeBuffer {
    uint8_t* p = nullptr;
    size_t n = 0;
    void resize(size_t bytes) {
        constexpr size_t kHuge = size_t{2} << 20;
        n = bytes;
        const size_t padded = (bytes + kHuge - 1) / kHuge * kHuge;
        p = static_cast<uint8_t*>(std::aligned_alloc(kHuge, padded));
        if (!p) std::abort();
        madvise(p, padded, MADV_HUGEPAGE);
    }
    uint8_t& operator[](size_t i) { return p[i]; }
    const uint8_t& operator[](size_t i) const { return p[i]; }
    ~HugeBuffer() { std::free(p); }
};

struct Matrix {
    HugeBuffer weights;  // rows x row_bytes
    std::vector<uint8_t> act;      // one row of the partner type
    int64_t rows = 0;
    size_t row_bytes = 0;
};

// Weight-like values: a per-row scale times approximately normal noise, rare outliers.
std::vector<float> make_values(uint64_t seed, int64_t n) {
    uint64_t s = seed;
    auto next = [&s] {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    };
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) {
        int64_t sum = 0;
        for (int k = 0; k < 4; ++k) sum += static_cast<int64_t>(next() >> 40);
        x = static_cast<float>(sum - (int64_t{1} << 25)) * (0.02f * 1.7320508f / 16777216.0f);
        if (next() % 997 == 0) x *= 12.0f;
    }
    return v;
}

size_t matrix_bytes() {
    const char* env = std::getenv("SYSLM_BENCH_MB");
    const long mb = env ? std::atol(env) : 64;
    return static_cast<size_t>(mb > 0 ? mb : 64) << 20;
}

// Built once per type (the reference quantizers are slow), shared by all ISAs and threads.
const Matrix& matrix(DType t) {
    static std::mutex mu;
    static std::map<DType, std::unique_ptr<Matrix>> cache;
    std::lock_guard<std::mutex> lock(mu);
    auto& m = cache[t];
    if (m) return *m;
    m = std::make_unique<Matrix>();
    const TypeTraits& tr = type_traits(t, Isa::Scalar);
    m->row_bytes = row_bytes(t, kCols);
    m->rows = static_cast<int64_t>((matrix_bytes() + m->row_bytes - 1) / m->row_bytes);
    m->weights.resize(static_cast<size_t>(m->rows) * m->row_bytes);
    std::vector<uint8_t> distinct(kDistinctRows * m->row_bytes);
    tr.from_float(make_values(1, kDistinctRows * kCols).data(), distinct.data(),
                  kDistinctRows * kCols);
    for (int64_t r = 0; r < m->rows; ++r)
        std::memcpy(&m->weights[static_cast<size_t>(r) * m->row_bytes],
                    &distinct[static_cast<size_t>(r % kDistinctRows) * m->row_bytes], m->row_bytes);
    m->act.resize(row_bytes(tr.vec_dot_type, kCols));
    type_traits(tr.vec_dot_type, Isa::Scalar)
        .from_float(make_values(2, kCols).data(), m->act.data(), kCols);
    return *m;
}

void BM_vec_dot(benchmark::State& state, DType t, Isa isa) {
    const Matrix& m = matrix(t);
    const VecDotFn dot = type_traits(t, isa).vec_dot;
    const int64_t begin = m.rows * state.thread_index() / state.threads();
    const int64_t end = m.rows * (state.thread_index() + 1) / state.threads();
    std::vector<float> out(static_cast<size_t>(end - begin));
    for (auto _ : state) {
        for (int64_t r = begin; r < end; ++r)
            out[static_cast<size_t>(r - begin)] =
                dot(kCols, &m.weights[static_cast<size_t>(r) * m.row_bytes], m.act.data());
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * (end - begin) * static_cast<int64_t>(m.row_bytes));
}

void BM_tokens(benchmark::State& state, DType t, Isa isa, bool batched) {
    constexpr int64_t kRows = 64, kN = 1024;
    const int nt = static_cast<int>(state.range(0));
    const TypeTraits& tr = type_traits(t, isa);
    const size_t wrow = row_bytes(t, kN), xrow = row_bytes(tr.vec_dot_type, kN);
    std::vector<uint8_t> w(wrow * kRows), x(xrow * static_cast<size_t>(nt));
    type_traits(t, Isa::Scalar).from_float(make_values(3, kRows * kN).data(), w.data(), kRows * kN);
    type_traits(tr.vec_dot_type, Isa::Scalar).from_float(make_values(4, nt * kN).data(), x.data(),
                                                          nt * kN);
    std::vector<float> out(static_cast<size_t>(kRows * nt));
    for (auto _ : state) {
        if (batched)
            vec_dot_tokens(tr, kN, kRows, w.data(), wrow, nt, x.data(), xrow, out.data(), kRows);
        else
            for (int i = 0; i < nt; ++i)
                vec_dot_rows(tr, kN, kRows, w.data(), wrow, x.data() + i * xrow, out.data() + i * kRows);
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
    }
    state.counters["GFLOP/s"] = benchmark::Counter(
        static_cast<double>(state.iterations()) * 2.0 * kRows * kN * nt * 1e-9,
        benchmark::Counter::kIsRate);
}

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                        DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K,
                        DType::Q4_K, DType::Q5_K, DType::Q6_K,
                        // the load-time layouts decode runs on (model/weights.cpp repacks)
                        DType::Q4_0_G8, DType::Q8_0_G8W};

int register_all() {
    for (DType t : kTypes)
        for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
            if (!isa_supported(isa)) continue;
            const std::string name = "vec_dot/" + std::string(dtype_name(t)) + "/" + isa_name(isa);
            benchmark::RegisterBenchmark(name.c_str(), BM_vec_dot, t, isa)
                ->Threads(1)
                ->Threads(2)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        }
    for (DType t : {DType::F32, DType::F16, DType::Q8_0})
        for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
            if (!isa_supported(isa)) continue;
            for (bool batched : {false, true}) {
                const std::string name = "tokens/" + std::string(dtype_name(t)) + "/" +
                                         isa_name(isa) + (batched ? "/batched" : "/alone");
                benchmark::RegisterBenchmark(name.c_str(), BM_tokens, t, isa, batched)
                    ->ArgName("tokens")
                    ->Arg(1)
                    ->Arg(2)
                    ->Arg(4)
                    ->Arg(8)
                    ->Arg(16)
                    ->Unit(benchmark::kMicrosecond);
            }
        }
    return 0;
}

const int kRegistered = register_all();

}  // namespace
}  // namespace syslm::kernels

BENCHMARK_MAIN();
