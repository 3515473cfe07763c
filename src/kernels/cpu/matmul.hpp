// Matrix times activations, the workhorse of inference: y[t, o] = sum_i W[o, i] * x[t, i] + b[o].
// W is stored as n_out rows of n_in elements in any type with TypeTraits; activations are
// float32 and are converted to the weight's partner type (vec_dot_type) once per call, then each
// weight row is read once for all tokens.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/dtype.hpp"
#include "core/thread_pool.hpp"
#include "kernels/cpu/gemm.hpp"

namespace syslm::kernels {

struct WeightView {
    DType type;
    int64_t n_in;   // row length (ne[0])
    int64_t n_out;  // number of rows
    const void* data;
    // W8A8 (Q8_0 weights only): the static activation scale; activations are quantized with it
    // (clipped at ±127 of it) instead of per block. 0: dynamic, as for every other matrix.
    float act_scale = 0.0f;
};

// x: n_tokens rows of w.n_in floats; y: n_tokens rows of w.n_out floats; bias: n_out or null.
// Many tokens (prefill) go through the packed GEMM (kernels/cpu/gemm.hpp) where the type and ISA
// have one; few tokens (decode, a draft being verified, a few batched sequences) through
// vec_dot_tokens: several weight rows per activation row, and for F32/F16 several tokens per
// weight vector; each token's result is the same whatever it is batched with.
void matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
            const float* bias = nullptr);

// Activations shared by several matmuls over the same input (q, k and v; gate and up): converted
// to a weight type's partner at most once rather than once per matmul. Keep one alive (reset()
// per use) so its buffer is not reallocated every token. x must outlive the uses.
class SharedActivations {
public:
    void reset(const float* x, int64_t n_tokens, int64_t n_in);
    const float* floats() const { return x_; }
    int64_t n_tokens() const { return n_tokens_; }
    int64_t n_in() const { return n_in_; }
    // The rows in `partner` (F32: x itself), converting on first request; row stride in bytes.
    const uint8_t* rows(DType partner, ThreadPool& pool, size_t& row_stride);
    // Q8_0 rows all quantized with one static scale (W8A8).
    const uint8_t* rows_static_q8_0(float scale, ThreadPool& pool, size_t& row_stride);

private:
    // x_ in one partner type; the returned rows stay valid until reset(), whatever else is asked
    // for meanwhile (q, k and v of a mixed-type model may want Q8_0 and Q8_K rows at once).
    struct Converted {
        DType type = DType::F32;
        float scale = 0.0f;  // the static scale the rows were made with (0: dynamic)
        bool valid = false;  // bytes hold x_ in type
        std::vector<uint8_t> bytes;
    };
    Converted& slot(DType type, float scale);  // a valid match, else a buffer to fill

    const float* x_ = nullptr;
    int64_t n_tokens_ = 0, n_in_ = 0;
    std::vector<Converted> converted_;  // buffers kept across reset()
};

// matmul() of x held in `x` (x.n_in() == w.n_in): the same result, with the conversion shared.
void matmul(const WeightView& w, SharedActivations& x, float* y, ThreadPool& pool,
            const float* bias = nullptr);

// One of several products over the same input (q, k and v; gate and up).
struct MatmulOutput {
    const WeightView& w;
    float* y;
    const float* bias = nullptr;
};

// matmul(o.w, x, o.y, pool, o.bias) for each output, with the same results. For one token with
// small matrices (each under kDecodeStreamsMinBytes, where the pool's hand-off costs as much as
// the product) the rows of all of them are shared out in one parallel_for, one hand-off instead
// of one per matrix; otherwise one matmul after the other. fused_matmuls() says which.
void matmul(std::initializer_list<MatmulOutput> outs, SharedActivations& x, ThreadPool& pool);
bool fused_matmuls(std::initializer_list<MatmulOutput> outs, int64_t n_tokens);

// The vec_dot path alone: activations quantized to the partner type, then vec_dot in tiles.
void matmul_vec_dot(const WeightView& w, const float* x, int64_t n_tokens, float* y,
                    ThreadPool& pool, const float* bias = nullptr);

// From this many tokens on, matmul() uses the GEMM. Float weights: kGemmMinTokens, the bench/gemm
// crossover (and what keeps their small batches exact f32 dot products). Quantized weights: the
// crossover measured once per machine and type (gemm_crossover, remembered as
// kernels/kernel_choices.hpp says), since the GEMM dequantizes the
// whole matrix per call and that cost against the vec_dot's per-token cost differs by CPU and
// type by an order of magnitude (AMX tiles make the product itself almost free). The
// environment variable SYSLM_GEMM_MIN_TOKENS overrides both (tests route small models through
// either path with it).
inline constexpr int64_t kGemmMinTokens = 32;
inline constexpr double kGemmCrossoverMargin = 1.10;  // how much faster the GEMM must time
int64_t gemm_min_tokens();            // the override, else kGemmMinTokens
int64_t gemm_min_tokens(DType type);  // what matmul() uses for weights of `type`

// While one lives on a thread, matmul() calls from that thread keep every batch below
// kGemmMinTokens on the vec_dot path, whatever the type: each token's result is then bit for bit
// what it would be alone (vec_dot_tokens' contract), not rounded to bf16 with its batch.
// Speculative verification holds one, so that greedy drafting returns the target's own tokens.
class ExactSmallBatches {
public:
    ExactSmallBatches();
    ~ExactSmallBatches();
    ExactSmallBatches(const ExactSmallBatches&) = delete;
    ExactSmallBatches& operator=(const ExactSmallBatches&) = delete;

private:
    bool previous_;
};

// The timings behind a quantized type's crossover: for each batch size tried, seconds of the
// vec_dot path and of the GEMM on one thread, for a 2048 x 256 matrix of the type.
struct GemmCrossover {
    int64_t min_tokens = kGemmMinTokens;
    struct Timing {
        int64_t tokens;
        double vec_dot_s, gemm_s;
    };
    std::vector<Timing> timings;  // empty where this process timed nothing
    KernelChoice record;          // remembered for the machine; empty for an override, float or no GEMM
};
const GemmCrossover& gemm_crossover(DType type);

// Batches on the vec_dot path (2 tokens or more) with Q4_0_G8 or Q8_0_G8W weights may run on the
// AMX int8 tiles instead of the VNNI dots (x86/quant_tokens_amx.cpp), where the CPU has them and
// they measured faster: 16 tokens x 256 rows x 2048 on one thread, best of three, once per
// machine and type (remembered). SYSLM_BATCH_DOT=vnni|amx-int8 overrides it. Never under ExactSmallBatches
// (their sums run in another order than a token's alone).
struct BatchDotChoice {
    bool amx = false;
    double vnni_ms = 0, amx_ms = 0;  // 0 where this process did not time them
    KernelChoice record;             // remembered for the machine; empty without a choice
};
bool amx_int8_available();
const BatchDotChoice& batch_dot_choice(DType type);
namespace x86 {
// s[t * bs + r] for r < nr <= 16 weight rows (bx bytes apart) and t < nt <= 64 tokens of Q8_0_G8
// activations (by bytes apart), n a multiple of 256: as vec_dot_tokens, summed in another order.
void dot_tokens_amx_int8(DType type, int64_t n, int nr, const void* x, size_t bx, int nt,
                         const void* y, size_t by, float* s, size_t bs);
}  // namespace x86
// The panel format matmul() uses for `type` and `n_tokens` on the active ISA (None: vec_dot).
GemmPanel matmul_gemm_panel(DType type, int64_t n_tokens);

}  // namespace syslm::kernels
