// Causal self-attention of a batch of new tokens over a layer's KV cache (keys already rotated).
// Token t sits at position pos0 + t and attends to the cached positions p with
// pos - window < p <= pos (window = 0: no window). GQA/MQA: query head h reads KV head
// h / (n_head / n_head_kv). Only the visible positions are scanned.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "core/dtype.hpp"
#include "core/thread_pool.hpp"
#include "kernels/isa.hpp"
#include "kernels/kernel_choices.hpp"

namespace syslm::kernels {

struct AttentionShape {
    int n_head;
    int n_head_kv;
    int head_dim;
    int64_t kv_stride;  // elements between consecutive positions in the K and V caches
    int window = 0;
    float scale;  // usually 1/sqrt(head_dim)
    // The caches' element types, K and V each: F32, F16, BF16, or a type of 32-element blocks
    // (Q8_0, Q4_0, ...: llama.cpp's quantized caches), whose blocks must not straddle heads.
    DType k_type = DType::F32, v_type = DType::F32;
    // May round Q, K, P and V to bf16 (prefill on the AMX tiles): set by a model whose weights
    // already went through bf16 products (anything but F32 on AMX); F32 models stay exact.
    bool bf16_products = false;
    // ALiBi (BLOOM, MPT): n_head slopes m_h; query head h at position t adds m_h (p - t) to its
    // scaled score of position p (a penalty growing with distance). Null: no bias.
    const float* alibi = nullptr;
    // Soft-capping (Gemma 2): each scaled score s becomes softcap tanh(s / softcap) before the
    // mask, ALiBi and softmax. 0: none.
    float softcap = 0.0f;
    // Global tokens (Longformer, StreamingLLM's sinks): with a window, the first global_tokens
    // positions stay visible to every later query besides its window. 0: none. Not with ALiBi.
    int global_tokens = 0;
    // BigBird's random blocks: with a window, the positions are cut into blocks of
    // random_block_size and each query block also sees random_blocks key blocks drawn from those
    // wholly after the global tokens and wholly before its first query's window
    // (random_key_blocks), the same for every head. 0: none. Not with ALiBi.
    int random_blocks = 0;
    int random_block_size = 0;
    uint64_t random_seed = 0;  // the layer's: model::attention_shape mixes in the layer index
    // Linear attention (kernels/cpu/linear_attention.hpp): phi(q).phi(k) with phi = elu + 1
    // instead of the softmax, as prefix sums; scale, window, ALiBi and soft-capping unused.
    // The entry points below branch there; lse then holds its denominators.
    bool linear = false;
};

// ALiBi's slopes for n_head heads and a maximum bias (8 in BLOOM and MPT): for the n heads of
// the largest power of two n <= n_head, 2^(-max_bias (h + 1) / n); the rest interleave the
// slopes of 2n heads, 2^(-max_bias (2 (h - n) + 1) / (2 n)) (the ALiBi paper; HF BLOOM and MPT,
// llama.cpp).
inline std::vector<float> alibi_slopes(int n_head, float max_bias) {
    int n = 1;
    while (2 * n <= n_head) n *= 2;
    std::vector<float> m(static_cast<size_t>(n_head));
    for (int h = 0; h < n_head; ++h)
        m[h] = h < n ? std::exp2(-max_bias * static_cast<float>(h + 1) / static_cast<float>(n))
                     : std::exp2(-max_bias * static_cast<float>(2 * (h - n) + 1) /
                                 static_cast<float>(2 * n));
    return m;
}

// (query, key) pairs a causal attention visits for queries at positions pos0 .. pos0 + n - 1,
// each seeing the `window` positions up to its own (0: all of them) and the first `global`
// positions before its window: the profiles' work count.
inline double attention_pairs(int64_t n_tokens, int64_t pos0, int window, int global = 0) {
    if (n_tokens <= 0) return 0;
    if (window > 0 && global > 0) {
        // Query p sees min(global, p - window + 1) positions before its window, when p >= window.
        double extra = 0;
        const int64_t first = std::max<int64_t>(pos0, window), last = pos0 + n_tokens - 1;
        for (int64_t p = first; p <= last && p - window + 1 < global; ++p)
            extra += static_cast<double>(p - window + 1);
        if (last - window + 1 >= global)
            extra += static_cast<double>(global) *
                     static_cast<double>(last - std::max(first, int64_t{global} + window - 1) + 1);
        return attention_pairs(n_tokens, pos0, window) + extra;
    }
    // Query p sees p + 1 keys up to the window: an arithmetic run, then a flat one.
    const auto run = [](double from, double to) { return (from + to) * (to - from + 1) / 2; };
    const int64_t first = pos0 + 1, last = pos0 + n_tokens;  // keys seen without a window
    if (window <= 0 || last <= window) return run(first, last);
    if (first > window) return static_cast<double>(n_tokens) * window;
    return run(first, window) + static_cast<double>(last - window) * window;
}

constexpr int kMaxRandomBlocks = 16;     // random key blocks per query block
constexpr int kMinRandomBlockSize = 16;  // positions per random block, at least

// SplitMix64's finaliser (Steele et al.): the random blocks' draw, the same in the PyTorch
// reference (tests/reference/test_bigbird.py).
constexpr uint64_t splitmix64(uint64_t x) {
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

bool has_random_blocks(const AttentionShape& s);
// The key blocks query block qb (positions [qb B, qb B + B)) draws, ascending, into
// out[0 .. kMaxRandomBlocks); returns how many: min(random_blocks, candidates), where the
// candidates are the blocks wholly at or after the global tokens and wholly before
// qb B - window + 1 (the first query's window), so they never overlap what a query already sees.
// Floyd's sampling without replacement, each step's number splitmix64(key + j) with
// key = splitmix64(seed ^ splitmix64(qb)).
int random_key_blocks(const AttentionShape& s, int64_t qb, int64_t* out);
// The (query, key) pairs the random blocks add for queries at positions pos0 .. pos0 + n - 1.
double random_block_pairs(const AttentionShape& s, int64_t n_tokens, int64_t pos0);
// attention_pairs of a shape: window, global tokens and random blocks (linear layers excluded).
double attention_pairs(const AttentionShape& s, int64_t n_tokens, int64_t pos0);

// q: n_tokens rows of n_head*head_dim; out: same shape. Uses the kernels of active_isa(). F16
// and quantized caches are widened to float block by block (kAttentionBlock positions of one KV
// head) into per-thread scratch, so the block kernels read floats either way.
// lse (training's forward; may be null): n_tokens x n_head log-sum-exp of each row's scaled
// scores, what attention_backward needs to rebuild the probabilities.
void attention(const AttentionShape& s, const float* q, const void* k_cache, const void* v_cache,
               int64_t n_tokens, int64_t pos0, float* out, ThreadPool& pool, float* lse = nullptr);
// The same with the kernels of `isa` (throws Error if this CPU lacks it): tests, benchmarks.
void attention(const AttentionShape& s, const float* q, const void* k_cache, const void* v_cache,
               int64_t n_tokens, int64_t pos0, float* out, ThreadPool& pool, Isa isa,
               float* lse = nullptr);

// K/V of one layer in pages (the serving engine's paged cache, infer/kv_pages.hpp): position p's
// row is row p % page_size of page p / page_size; k[i] / v[i] point at page i's rows of this
// layer (page_size rows of kv_stride elements, of k_type / v_type).
struct LinearState;  // linear_attention.hpp

struct KvPagesView {
    const void* const* k;
    const void* const* v;
    int page_size;
};
// attention() over a paged cache: the same math, bit for bit (rows are gathered per block into
// the scratch the F16 path widens into anyway).
void attention_paged(const AttentionShape& s, const float* q, const KvPagesView& kv,
                     int64_t n_tokens, int64_t pos0, float* out, ThreadPool& pool);
void attention_paged(const AttentionShape& s, const float* q, const KvPagesView& kv,
                     int64_t n_tokens, int64_t pos0, float* out, ThreadPool& pool, Isa isa);
// Several sequences at once (a serving step): the same results as one call each, bit for bit.
// A decode step's sequences share one pool loop, each job reading every KV head of its rows.
struct PagedSequence {
    KvPagesView kv;
    const float* q;  // n_tokens rows of n_head*head_dim
    float* out;      // the same shape
    int64_t n_tokens, pos0;
    // This sequence's window where the shape has one (a local layer); 0: the shape's.
    int window = 0;
    // A linear layer's recurrent state for this sequence (linear_attention.hpp); null: none.
    LinearState* linear = nullptr;
};
void attention_paged(const AttentionShape& s, std::span<const PagedSequence> seqs,
                     ThreadPool& pool);
void attention_paged(const AttentionShape& s, std::span<const PagedSequence> seqs, ThreadPool& pool,
                     Isa isa);

// Gradients of attention over one sequence from position 0 (F32 K/V, kv_stride apart), given
// the forward's output o and lse: dq (n_tokens x n_head*head_dim) and dk, dv (n_tokens rows
// kv_stride apart, the KV heads' columns) are overwritten. The probabilities are rebuilt from
// q, k and lse one row at a time (FlashAttention's backward): nothing T x T is stored.
void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                        const float* o, const float* lse, const float* dout, int64_t n_tokens,
                        float* dq, float* dk, float* dv, ThreadPool& pool);
// The same with the kernels of `isa` (throws Error if this CPU lacks it): tests.
void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                        const float* o, const float* lse, const float* dout, int64_t n_tokens,
                        float* dq, float* dk, float* dv, ThreadPool& pool, Isa isa);

// One job's query columns for the per-ISA block kernel (attention_body.hpp). Column i is one
// (token, head) of the job; columns are padded to a multiple of the vector width. A plain
// aggregate: the ISA files must not emit inline constructors.
struct AttentionColumns {
    const float* qt;  // [d][nqp] queries, transposed and multiplied by the scale; 0 in padding
                      // (row mode: [nq][d], see AttentionKernels::block_rows)
    const float* lo;  // [nqp] first visible position of each column (as float)
    const float* hi;  // [nqp] last visible position (-1 in padding columns: nothing visible)
    float* m;         // [nqp] running max (starts at -1e30, finite so that e^(m - m') is never NaN)
    float* l;         // [nqp] running sum of e^(score - m)
    float* o;         // [nq][d] unnormalised output, rescaled when m grows
    float* s;         // scratch: [kAttentionBlock + 8][nqp] scores, then probabilities
    float* c;         // scratch: [nqp] rescale factors
    int nq, nqp, d;
    const float* slope;  // [nqp] ALiBi slope of each column (0 in padding); null: no ALiBi
    float softcap;       // AttentionShape::softcap (0: none)
};

constexpr int kAttentionBlock = 64;  // KV positions per block

// One job of attention_backward: a sequence's rows of one KV head (attention_backward_body.hpp).
struct AttentionBackwardJob {
    const AttentionShape* shape;
    int kv_head;
    int64_t n_tokens;
    const float *q, *k, *v, *o, *lse, *dout;
    float *dq, *dk, *dv;
    float* scratch;  // attention_backward_scratch(shape, n_tokens) floats
};

inline int64_t attention_backward_scratch(const AttentionShape& s, int64_t n_tokens) {
    return 2 * int64_t{s.head_dim} * kAttentionBlock + 2 * 16 * kAttentionBlock +
           n_tokens * (s.n_head / s.n_head_kv) + kAttentionBlock;  // 16: kBackwardTileRows
}

// Linear attention's vector loops (linear_attention_body.hpp): d x d sums S (row i for feature i)
// and z, and rows of d.
struct LinearAttentionKernels {
    void (*update)(float* S, float* z, const float* g, const float* v, float c,
                   int d);  // S += g v^T, z += c g
    float (*query)(const float* S, const float* z, const float* f, int d,
                   float* out);  // out = S^T f; f . z
    void (*rows_dot)(const float* S, const float* z, const float* a, float c, int d,
                     float* df);                                       // df_i = S_i . a + z_i c
    void (*grad_v)(const float* S, const float* g, int d, float* dv);  // dv = S^T g
    float (*dot)(const float* a, const float* b, int n);
    void (*axpy)(float* y, float a, const float* x, int n);  // y += a x
    void (*phi)(const float* x, float* y, int n);            // y = elu(x) + 1 (y may be x)
    void (*mul_dphi)(const float* x, float* y, int n);       // y *= phi'(x)
};

// LoRA's row-kernel loops (lora_body.hpp), for adapter matrices in f32 [0] or f16 [1], on up to
// kLoraRowGroup rows at once (the rows of one adapter share each load of its matrices).
constexpr int kLoraRowGroup = 4;
struct LoraKernels {
    // out[j * r + k] = scale (a_k . x[j]) for the r rows a_k of a (n values each), j < nx
    void (*down[2])(const void* a, int r, int n, const float* const* x, int nx, float scale,
                    float* out);
    // y[j][0..n) += sum_k m[j * r + k] b[k * stride + 0..n) for k < r, j < ny
    void (*axpy_rows[2])(float* const* y, int ny, const float* m, const void* b, int64_t stride,
                         int r, int n);
};

struct AttentionKernels {
    Isa isa;
    int lanes;  // vector width in floats: columns are padded to a multiple of it
    // Attends the columns to the KV rows k/v[j * stride] (0 <= j < np <= kAttentionBlock) at
    // positions p0 + j: scores, masks, online-softmax update of m / l / o.
    void (*block)(const AttentionColumns& c, const float* k, const float* v, int64_t stride,
                  int64_t p0, int np);
    // The same in row mode, for jobs of at most lanes / 4 columns (decode without a large GQA
    // group): c.qt holds the scaled queries as rows [nq][d] and c.s is [nq][kAttentionBlock];
    // positions lie along the lanes. Null in the scalar table (lanes = 1: never used).
    void (*block_rows)(const AttentionColumns& c, const float* k, const float* v, int64_t stride,
                       int64_t p0, int np);
    // block_rows over the f16 rows of F16 caches, read in place: k[j] and v[j] point at
    // position p0 + j's columns of the job's KV head, wherever its page lies.
    void (*block_rows_f16)(const AttentionColumns& c, const uint16_t* const* k,
                           const uint16_t* const* v, int64_t p0, int np);
    // dst[j * d + i] = src[j * stride + i] (f16 -> float) for j < np, i < d.
    void (*widen_f16)(const uint16_t* src, int64_t stride, int np, int d, float* dst);
    void (*backward_job)(const AttentionBackwardJob& job);
    LinearAttentionKernels linear;
    LoraKernels lora;  // not attention, but the same vector types and ISA files
};

// One prefill job on the AMX tiles (x86/attention_amx.cpp): the queries of tokens [t0, t1) and
// of the G heads of KV head hk, over the visible positions of F32 K/V rows. Rows i =
// (t - t0) * G + g, as the FP32 job's columns. Fills m, l ([nq]) and the unnormalised o
// ([nq rounded up to 32][D]) as the FP32 job leaves them: Q, K, P and V are rounded to bf16,
// scores and the softmax stay f32.
struct AttentionAmxJob {
    const float* q;
    int64_t q_stride;    // floats between tokens' query rows
    const float *k, *v;  // the rows of KV head hk at position kv_first
    int64_t kv_stride;   // floats between positions
    int64_t kv_first;
    int64_t t0, t1, pos0;  // tokens [t0, t1) sit at positions pos0 + t
    int hk, G, D, window;
    float scale;
    float *m, *l, *o;
};
bool attention_amx_supported(int head_dim);  // AMX-BF16 granted, head_dim a multiple of 32 <= 256
// Whether prefill (64 query rows or more, no lse) runs on the AMX tiles: timed once per machine
// against the f32 kernel on a 256-token prefill (one thread) and remembered
// (kernels/kernel_choices.hpp); SYSLM_ATTENTION=f32|amx decides instead.
struct AttentionChoice {
    bool amx = false;
    double f32_ms = 0, amx_ms = 0;  // 0: not timed by this process
    KernelChoice record;            // empty without a choice to make
};
const AttentionChoice& attention_prefill_choice();
// For tests and benchmarks: while alive, this thread's prefill attention takes the AMX tiles
// (where supported) or not, whatever was measured.
class AttentionAmxOverride {
public:
    explicit AttentionAmxOverride(bool amx);
    ~AttentionAmxOverride();
    AttentionAmxOverride(const AttentionAmxOverride&) = delete;
    AttentionAmxOverride& operator=(const AttentionAmxOverride&) = delete;

private:
    int saved_;
};

// The table for `isa` (throws Error if this CPU lacks it).
const AttentionKernels& attention_kernels(Isa isa);

namespace x86 {
AttentionKernels attention_kernels_avx2();           // attention_avx2.cpp
AttentionKernels attention_kernels_avx512();         // attention_avx512.cpp
void attention_job_amx(const AttentionAmxJob& job);  // attention_amx.cpp
}  // namespace x86

}  // namespace syslm::kernels
