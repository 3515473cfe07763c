// Tiled causal attention with an online softmax (FlashAttention-style), for prefill and decode.
//
// Work is split into jobs of (tile of query tokens, KV head, slice of positions). A job packs the
// queries of its tile and of every head of the GQA group as the columns of a small matrix, then
// walks the visible KV positions in blocks: each block's K rows are read once for all columns
// (scores as a small matrix product), its V rows once (P.V as another). Scores never exist
// beyond one block: per column the job keeps the running max m, the running sum l and the
// unnormalised output o, rescaled when the max grows (attention_body.hpp, one instantiation per
// ISA). When there are fewer (tile, head) jobs than threads — decode with few KV heads — the
// positions are split into slices whose partial (m, l, o) are merged afterwards
// (flash-decoding). A serving step's decode sequences share one pool loop instead of one each,
// a job taking one sequence's every KV head block by block (attention_paged over a span).
#include "kernels/cpu/attention.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "kernels/cpu/attention_backward_body.hpp"
#include "kernels/cpu/attention_body.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/linear_attention.hpp"
#include "kernels/cpu/linear_attention_body.hpp"
#include "kernels/cpu/lora_body.hpp"
#include "kernels/cpu/timing_inputs.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::kernels {
namespace {

constexpr int64_t kTileTokens = 64;  // query tokens per job: 4 query vectors a score tile
constexpr int64_t kMinSlice = 256;   // don't split the positions finer than this
constexpr float kNoMax = -1e30f;     // initial running max (finite: see AttentionColumns::m)

// The scalar reference of the vector type the block kernel is written against.
struct VScalar {
    using T = float;
    using M = bool;
    static constexpr int W = 1;
    static constexpr int kScoreRows = 4, kScoreVecs = 4, kPvRows = 2, kPvVecs = 4;
    static T zero() { return 0.0f; }
    static T set1(float x) { return x; }
    static T load(const float* p) { return *p; }
    static void store(float* p, T x) { *p = x; }
    static T load_n(const float* p, int n) { return n > 0 ? *p : 0.0f; }
    static T load_h(const uint16_t* p) { return f16_to_f32(*p); }
    static T load_h_n(const uint16_t* p, int n) { return n > 0 ? f16_to_f32(*p) : 0.0f; }
    static void store_n(float* p, T x, int n) {
        if (n > 0) *p = x;
    }
    static T add(T a, T b) { return a + b; }
    static T sub(T a, T b) { return a - b; }
    static T mul(T a, T b) { return a * b; }
    static T div(T a, T b) { return a / b; }
    static T max(T a, T b) { return std::max(a, b); }
    static T fmadd(T a, T b, T c) { return a * b + c; }
    static M le(T a, T b) { return a <= b; }
    static M both(M a, M b) { return a && b; }
    static T select(M m, T a, T b) { return m ? a : b; }
    static T keep(M m, T a) { return m ? a : 0.0f; }
    static float hsum(T v) { return v; }
    static T exp(T x) { return std::exp(x); }
};

void attend_block_scalar(const AttentionColumns& c, const float* k, const float* v, int64_t stride,
                         int64_t p0, int np) {
    attend_block<VScalar>(c, k, v, stride, p0, np);
}

void backward_job_scalar(const AttentionBackwardJob& job) {
    attention_backward_job<VScalar>(job);
}

void widen_f16_scalar(const uint16_t* src, int64_t stride, int np, int d, float* dst) {
    widen_f16_rows<VScalar>(src, stride, np, d, dst);
}

// How one cache (K or V) keeps its rows: `stride` elements of `type` per position.
struct CacheRowsOf {
    DType type;
    int64_t stride;
    size_t row_bytes;    // row_bytes(type, stride)
    int64_t block;       // elements per block of type (1 for the float types)
    ToFloatFn to_float;  // the ISA's, for the block types and BF16
};

CacheRowsOf cache_rows_of(DType type, int64_t stride, Isa isa) {
    const bool plain = type == DType::F32 || type == DType::F16;
    return {type, stride, row_bytes(type, stride), dtype_info(type).block_size,
            plain ? nullptr : type_traits(type, isa).to_float};
}

// Position p's row of a cache (contiguous, or in pages when `pages`).
const uint8_t* cache_row(const CacheRowsOf& L, const void* cache, const void* const* pages,
                         int page_size, int64_t p) {
    const void* base = pages ? pages[p / page_size] : cache;
    return static_cast<const uint8_t*>(base) + (pages ? p % page_size : p) * L.row_bytes;
}

// Asks for the cache lines gather_rows will read (the same arguments), so that the misses of
// K's and V's rows overlap instead of surfacing one widening loop at a time.
void prefetch_rows(const CacheRowsOf& L, const void* cache, const void* const* pages, int page_size,
                   int64_t p0, int np, int64_t col, int d) {
    const size_t col_bytes = row_bytes(L.type, col), span = row_bytes(L.type, d);
    for (int j = 0; j < np; ++j) {
        const uint8_t* first = cache_row(L, cache, pages, page_size, p0 + j) + col_bytes;
        for (size_t off = 0; off < span; off += 64) __builtin_prefetch(first + off);
    }
}

// Rows [p0, p0 + np) of a cache (contiguous, or in pages when `pages`), columns
// [col, col + d), to dst[j * d + i] as floats: F16 widened, F32 copied, others dequantized
// (col and d are whole blocks: kv_rows checks the head size).
void gather_rows(const AttentionKernels& kern, const CacheRowsOf& L, const void* cache,
                 const void* const* pages, int page_size, int64_t p0, int np, int64_t col, int d,
                 float* dst) {
    const size_t col_bytes = row_bytes(L.type, col);
    for (int j = 0; j < np;) {
        const int64_t p = p0 + j;
        const int n =
            pages ? static_cast<int>(std::min<int64_t>(np - j, page_size - p % page_size)) : np - j;
        const uint8_t* first = cache_row(L, cache, pages, page_size, p) + col_bytes;
        float* out = dst + static_cast<int64_t>(j) * d;
        if (L.type == DType::F16) {
            kern.widen_f16(reinterpret_cast<const uint16_t*>(first), L.stride, n, d, out);
        } else if (L.type == DType::F32) {
            for (int r = 0; r < n; ++r)
                std::copy_n(reinterpret_cast<const float*>(first + r * L.row_bytes), d,
                            out + static_cast<int64_t>(r) * d);
        } else {
            for (int r = 0; r < n; ++r)
                L.to_float(first + r * L.row_bytes, out + static_cast<int64_t>(r) * d, d);
        }
        j += n;
    }
}

constexpr int64_t kAmxMinRows = 64;  // query rows (tokens x GQA group): fewer stay f32
thread_local int forced_amx = -1;    // -1: the measured choice; 0 / 1: while it is measured

bool use_amx_attention(int head_dim) {
    if (forced_amx >= 0) return forced_amx == 1 && attention_amx_supported(head_dim);
    return attention_amx_supported(head_dim) && attention_prefill_choice().amx;
}

// attention() and attention_paged(): paged == nullptr reads the contiguous caches.
void attention_impl(const AttentionShape& s, const float* q, const void* k_cache,
                    const void* v_cache, const KvPagesView* paged, int64_t n_tokens, int64_t pos0,
                    float* out, ThreadPool& pool, Isa isa, float* lse);
void attention_paged_batch(const AttentionShape& s, std::span<const PagedSequence> seqs,
                           ThreadPool& pool, Isa isa);

void axpy(float* __restrict acc, float w, const float* __restrict v, int d) {
    for (int i = 0; i < d; ++i) acc[i] += w * v[i];
}

void scale(float* acc, float s, int d) {
    for (int i = 0; i < d; ++i) acc[i] *= s;
}

}  // namespace

AttentionAmxOverride::AttentionAmxOverride(bool amx) : saved_(forced_amx) {
    forced_amx = amx ? 1 : 0;
}

AttentionAmxOverride::~AttentionAmxOverride() {
    forced_amx = saved_;
}

bool attention_amx_supported(int head_dim) {
    return isa_supported(Isa::Avx512) && amx_bf16_available() && head_dim % 32 == 0 &&
           head_dim <= 256;
}

namespace {
// Times the f32 kernel and the AMX tiles on one prefill; sets c's times and choice.
void time_prefill_attention(AttentionChoice& c) {
    // A 256-token prefill of 4 query heads on 2 KV heads (head size 64), one thread.
    const AttentionShape sh{4, 2, 64, 128, 0, 0.125f, DType::F32, DType::F32, true};
    constexpr int64_t T = 256;
    std::vector<float> q(T * 256), k(T * 128), v(T * 128), out(T * 256);
    uint64_t r = 3;
    for (auto* x : {&q, &k, &v}) fill_timing_values(*x, r);
    ThreadPool pool(1);
    double best[2] = {1e30, 1e30};
    for (int rep = 0; rep < 3; ++rep)
        for (int mode : {0, 1}) {
            forced_amx = mode;
            const auto t0 = std::chrono::steady_clock::now();
            attention_impl(sh, q.data(), k.data(), v.data(), nullptr, T, 0, out.data(), pool,
                           Isa::Avx512, nullptr);
            best[mode] = std::min(
                best[mode],
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
    forced_amx = -1;
    c.f32_ms = best[0] * 1e3;
    c.amx_ms = best[1] * 1e3;
    c.amx = best[1] < best[0];
}
}  // namespace

const AttentionChoice& attention_prefill_choice() {
    static const AttentionChoice choice = [] {
        AttentionChoice c;
        if (const char* env = std::getenv("SYSLM_ATTENTION"); env && *env) {
            const std::string want = env;
            SYSLM_CHECK(want == "f32" || want == "amx", "SYSLM_ATTENTION='", want,
                        "': expected f32 or amx");
            SYSLM_CHECK(want == "f32" || attention_amx_supported(64),
                        "SYSLM_ATTENTION=amx: this CPU has no AMX-BF16 tiles granted");
            c.amx = want == "amx";
            return c;
        }
        if (!attention_amx_supported(64)) return c;
        c.record = remembered_kernel_choice(
            "attention-prefill",
            [&] {
                time_prefill_attention(c);
                KernelChoice m;
                m.value = c.amx ? "amx-bf16" : "f32";
                char line[128];
                std::snprintf(line, sizeof line,
                              "f32 %.2f ms, amx-bf16 %.2f ms (1 thread, 256 tokens)", c.f32_ms,
                              c.amx_ms);
                m.timings = line;
                return m;
            },
            [](const std::string& v) { return v == "f32" || v == "amx-bf16"; });
        c.amx = c.record.value == "amx-bf16";
        return c;
    }();
    return choice;
}

const AttentionKernels& attention_kernels(Isa isa) {
    static const AttentionKernels tables[3] = {
        AttentionKernels{Isa::Scalar, 1, attend_block_scalar, nullptr, nullptr, widen_f16_scalar,
                         backward_job_scalar, linear_attention_table<VScalar>(),
                         lora_table<VScalar>()},
        isa_supported(Isa::Avx2) ? x86::attention_kernels_avx2() : AttentionKernels{},
        isa_supported(Isa::Avx512) ? x86::attention_kernels_avx512() : AttentionKernels{},
    };
    if (!isa_supported(isa))
        fail("attention: this CPU does not support the ", isa_name(isa), " kernels");
    return tables[static_cast<int>(isa)];
}

void attention(const AttentionShape& s, const float* q, const void* k_cache, const void* v_cache,
               int64_t n_tokens, int64_t pos0, float* out, ThreadPool& pool, float* lse) {
    attention(s, q, k_cache, v_cache, n_tokens, pos0, out, pool, active_isa(), lse);
}

void attention(const AttentionShape& s, const float* q, const void* k_cache, const void* v_cache,
               int64_t n_tokens, int64_t pos0, float* out, ThreadPool& pool, Isa isa, float* lse) {
    if (s.linear)  // lse: the denominators its backward reads instead
        return linear_attention(s, q, k_cache, v_cache, nullptr, n_tokens, pos0, out, pool, isa,
                                lse);
    attention_impl(s, q, k_cache, v_cache, nullptr, n_tokens, pos0, out, pool, isa, lse);
}

void attention_paged(const AttentionShape& s, const float* q, const KvPagesView& kv,
                     int64_t n_tokens, int64_t pos0, float* out, ThreadPool& pool) {
    attention_paged(s, q, kv, n_tokens, pos0, out, pool, active_isa());
}

void attention_paged(const AttentionShape& s, const float* q, const KvPagesView& kv,
                     int64_t n_tokens, int64_t pos0, float* out, ThreadPool& pool, Isa isa) {
    const PagedSequence one{kv, q, out, n_tokens, pos0};
    attention_paged(s, {&one, 1}, pool, isa);
}

void attention_paged(const AttentionShape& s, std::span<const PagedSequence> seqs,
                     ThreadPool& pool) {
    attention_paged(s, seqs, pool, active_isa());
}

void attention_paged(const AttentionShape& s, std::span<const PagedSequence> seqs, ThreadPool& pool,
                     Isa isa) {
    if (s.linear) {
        for (const PagedSequence& q : seqs)
            linear_attention(s, q.q, nullptr, nullptr, &q.kv, q.n_tokens, q.pos0, q.out, pool, isa,
                             nullptr, q.linear);
        return;
    }
    attention_paged_batch(s, seqs, pool, isa);
}

namespace {

// Merges the slices' partial states and normalises: out = sum_s e^(m_s - M) o_s /
// sum_s e^(m_s - M) l_s (and lse = M + log L for training).
void merge_slices(const AttentionShape& s, int64_t n_tokens, int64_t n_slices, const float* st,
                  const float* acc_all, float* out, float* lse) {
    const int D = s.head_dim;
    const int64_t q_stride = static_cast<int64_t>(s.n_head) * D;
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int h = 0; h < s.n_head; ++h) {
            float M = kNoMax;
            for (int64_t sl = 0; sl < n_slices; ++sl)
                M = std::max(M, st[2 * ((sl * n_tokens + t) * s.n_head + h)]);
            float* o = out + t * q_stride + static_cast<int64_t>(h) * D;
            if (n_slices == 1) {  // common case: o / l
                const size_t i = static_cast<size_t>(t * s.n_head + h);
                const float inv = 1.0f / st[2 * i + 1];
                for (int d = 0; d < D; ++d) o[d] = acc_all[i * D + d] * inv;
                if (lse) lse[t * s.n_head + h] = st[2 * i] + std::log(st[2 * i + 1]);
                continue;
            }
            std::fill_n(o, D, 0.0f);
            double L = 0;
            for (int64_t sl = 0; sl < n_slices; ++sl) {
                const size_t i = static_cast<size_t>((sl * n_tokens + t) * s.n_head + h);
                if (st[2 * i + 1] == 0.0f) continue;  // slice saw no visible position
                const float c = std::exp(st[2 * i] - M);
                L += static_cast<double>(st[2 * i + 1]) * c;
                axpy(o, c, acc_all + i * D, D);
            }
            scale(o, static_cast<float>(1.0 / L), D);
            if (lse) lse[t * s.n_head + h] = M + static_cast<float>(std::log(L));
        }
}

// Whether the first positions stay visible to every query besides its window.
bool has_globals(const AttentionShape& s) {
    return s.window > 0 && s.global_tokens > 0;
}

// BigBird: the random key blocks of the query blocks holding a tile's tokens.
struct TileDraws {
    static constexpr int kMaxQueryBlocks = kTileTokens / kMinRandomBlockSize + 1;
    int64_t qb0 = 0;  // the first token's query block
    int n_qb = 0;
    int n_drawn[kMaxQueryBlocks];
    int64_t drawn[kMaxQueryBlocks][kMaxRandomBlocks];
    int n_blocks = 0;  // their union, ascending
    int64_t blocks[kMaxQueryBlocks * kMaxRandomBlocks];

    TileDraws(const AttentionShape& s, int64_t first, int64_t last) {  // query positions
        if (!has_random_blocks(s)) return;
        const int64_t B = s.random_block_size;
        qb0 = first / B;
        n_qb = static_cast<int>(last / B - qb0 + 1);
        SYSLM_CHECK(n_qb <= kMaxQueryBlocks, "attention: a tile spans ", n_qb, " random blocks");
        for (int i = 0; i < n_qb; ++i) {
            n_drawn[i] = random_key_blocks(s, qb0 + i, drawn[i]);
            for (int k = 0; k < n_drawn[i]; ++k) blocks[n_blocks++] = drawn[i][k];
        }
        std::sort(blocks, blocks + n_blocks);
        n_blocks = static_cast<int>(std::unique(blocks, blocks + n_blocks) - blocks);
    }

    // Whether the query at position pos sees key block kb.
    bool sees(const AttentionShape& s, int64_t pos, int64_t kb) const {
        const int i = static_cast<int>(pos / s.random_block_size - qb0);
        return std::find(drawn[i], drawn[i] + n_drawn[i], kb) != drawn[i] + n_drawn[i];
    }
};

// A job's queries as the columns i = (t - t0) * G + g of a small matrix, transposed (or row
// by row in row mode) with the scale folded in, each with its visible range [lo, hi] and a fresh
// (m, l); padding columns up to nqp see nothing. With global tokens, [0, ghi] is what a column
// sees of them before its window (empty, ghi = -1, where the window covers them).
void pack_columns(const AttentionShape& s, const float* q, int64_t pos0, int64_t t0, int hk, int nq,
                  int nqp, bool rows, float* qt, float* lo, float* hi, float* m, float* l,
                  float* slope, float* glo, float* ghi) {
    const int D = s.head_dim, G = s.n_head / s.n_head_kv;
    const int64_t q_stride = static_cast<int64_t>(s.n_head) * D;
    for (int i = 0; i < nqp; ++i) {
        m[i] = kNoMax;
        l[i] = 0.0f;
        slope[i] = 0.0f;
        glo[i] = 0.0f;
        ghi[i] = -1.0f;
        if (i >= nq) {  // padding: sees nothing
            lo[i] = 0.0f;
            hi[i] = -1.0f;
            if (!rows)
                for (int d = 0; d < D; ++d) qt[static_cast<int64_t>(d) * nqp + i] = 0.0f;
            continue;
        }
        const int64_t t = t0 + i / G, pos = pos0 + t;
        const int h = hk * G + i % G;
        const float* qv = q + t * q_stride + static_cast<int64_t>(h) * D;
        for (int d = 0; d < D; ++d)
            qt[rows ? static_cast<int64_t>(i) * D + d : static_cast<int64_t>(d) * nqp + i] =
                qv[d] * s.scale;
        hi[i] = static_cast<float>(pos);
        if (s.alibi) slope[i] = s.alibi[h];
        const int64_t first = s.window > 0 ? std::max<int64_t>(0, pos - s.window + 1) : 0;
        lo[i] = static_cast<float>(first);
        if (has_globals(s))
            ghi[i] = static_cast<float>(std::min<int64_t>(s.global_tokens, first) - 1);
    }
}

// Where a job reads its K/V rows: the caller's contiguous F32 cache, the visible span widened
// (F16, quantized) or gathered (pages) once up front, or block by block into the job's own
// scratch.
struct KvRows {
    const AttentionKernels* kern;
    CacheRowsOf kl, vl;  // K's and V's element layout
    const void *k_cache, *v_cache;
    const void* const* k_pages;
    const void* const* v_pages;
    int page_size;
    int64_t stride;  // elements per position in the cache (every KV head)
    bool gathered, up_front;
    float* kwide = nullptr;  // the widened span (up_front), from position first_pos
    float* vwide = nullptr;
    int64_t first_pos = 0;

    // The first rows of the whole cache, as attention_job_amx takes them (up_front or F32).
    const float* k_rows() const { return up_front ? kwide : static_cast<const float*>(k_cache); }
    const float* v_rows() const { return up_front ? vwide : static_cast<const float*>(v_cache); }
    int64_t rows_first() const { return up_front ? first_pos : 0; }

    // Widens (or gathers) the span [first, first + span) once, for every job, into `wide`.
    void widen_span(int64_t first, int64_t span, std::vector<float>& wide, ThreadPool& pool) {
        const size_t n = static_cast<size_t>(span * stride);
        wide.resize(2 * n);
        kwide = wide.data();
        vwide = wide.data() + n;
        first_pos = first;
        const int row = static_cast<int>(stride);
        pool.parallel_for(span, [&](int64_t b, int64_t e, int) {
            const int rows = static_cast<int>(e - b);
            gather_rows(*kern, kl, k_cache, k_pages, page_size, first + b, rows, 0, row,
                        kwide + b * stride);
            gather_rows(*kern, vl, v_cache, v_pages, page_size, first + b, rows, 0, row,
                        vwide + b * stride);
        });
    }

    // Whether row-mode jobs read the rows in place as f16 instead of widening them first.
    bool f16_in_place() const {
        return kl.type == DType::F16 && vl.type == DType::F16 && !up_front &&
               kern->block_rows_f16 != nullptr;
    }

    // Attends row-mode columns c to positions [p0, p0 + np) of KV head columns [kv_off, ...)
    // of F16 caches (f16_in_place), read where they lie, in one kernel call as a gathered block
    // would be (so that paged and contiguous caches give the same bits).
    void attend_f16(const AttentionColumns& c, int64_t p0, int np, int64_t kv_off, int D) const {
        prefetch_rows(kl, k_cache, k_pages, page_size, p0, np, kv_off, D);
        prefetch_rows(vl, v_cache, v_pages, page_size, p0, np, kv_off, D);
        const uint16_t* k[kAttentionBlock];
        const uint16_t* v[kAttentionBlock];
        for (int j = 0; j < np; ++j) {
            k[j] = reinterpret_cast<const uint16_t*>(
                       cache_row(kl, k_cache, k_pages, page_size, p0 + j)) +
                   kv_off;
            v[j] = reinterpret_cast<const uint16_t*>(
                       cache_row(vl, v_cache, v_pages, page_size, p0 + j)) +
                   kv_off;
        }
        kern->block_rows_f16(c, k, v, p0, np);
    }

    // Positions [p0, p0 + np) of the columns [kv_off, kv_off + D): K and V row pointers and
    // their row stride (kw / vw: the job's scratch, filled when the rows are gathered here).
    int64_t block(int64_t p0, int np, int64_t kv_off, int D, float* kw, float* vw, const float** k,
                  const float** v) const {
        if (up_front) {
            const int64_t at = (p0 - first_pos) * stride + kv_off;
            *k = kwide + at;
            *v = vwide + at;
            return stride;
        }
        if (gathered) {
            prefetch_rows(kl, k_cache, k_pages, page_size, p0, np, kv_off, D);
            prefetch_rows(vl, v_cache, v_pages, page_size, p0, np, kv_off, D);
            gather_rows(*kern, kl, k_cache, k_pages, page_size, p0, np, kv_off, D, kw);
            gather_rows(*kern, vl, v_cache, v_pages, page_size, p0, np, kv_off, D, vw);
            *k = kw;
            *v = vw;
            return D;
        }
        const int64_t at = p0 * stride + kv_off;
        *k = static_cast<const float*>(k_cache) + at;
        *v = static_cast<const float*>(v_cache) + at;
        return stride;
    }
};

// One attention call's jobs: (tile of query tokens, KV head, slice of positions), each leaving
// its (m, l, o) per query row in the shared state for merge_slices.
struct AttentionJobs {
    const AttentionShape& s;
    const AttentionKernels& kern;
    const KvRows& kv;
    const float* q;
    int64_t n_tokens, pos0, n_tiles, n_slices, slice_len, first_pos, last_pos;
    bool amx;
    float* st;       // per (slice, token, head): m, l
    float* acc_all;  // per (slice, token, head): the unnormalised output

    int D() const { return s.head_dim; }
    int G() const { return s.n_head / s.n_head_kv; }
    int max_nq() const { return static_cast<int>(kTileTokens) * G(); }

    // Jobs [b, e) on one thread, with its scratch reused by every job.
    void run(int64_t b, int64_t e) const {
        thread_local std::vector<float> buf;
        const Scratch sc = scratch(buf, 1, max_nq());
        for (int64_t job = b; job < e; ++job) run_job(job, sc);
    }

    // The one tile of a short call (n_tiles == 1, not on AMX), slice `slice`, every KV head in
    // one job: blocks outer and heads inner, so each cached row is fetched once for all heads
    // (a decode step of many sequences; attention_paged's batch). Each head's arithmetic is
    // run_job's, in the same order.
    void run_heads(int64_t slice) const {
        thread_local std::vector<float> buf;
        const int nq = static_cast<int>(n_tokens) * G(), H = s.n_head_kv, D = this->D();
        const Scratch sc = scratch(buf, H, nq);
        thread_local std::vector<AttentionColumns> cols;
        cols.resize(static_cast<size_t>(H));
        const bool rows = nq * 4 <= kern.lanes;
        for (int hk = 0; hk < H; ++hk) cols[hk] = begin(0, n_tokens, hk, head_scratch(sc, hk));
        const auto block = rows ? kern.block_rows : kern.block;
        const bool in_place = rows && kv.f16_in_place();
        const auto visit = [&](int64_t lo_p, int64_t hi_p, bool global) {
            for (int64_t p0 = lo_p; p0 < hi_p; p0 += kAttentionBlock) {
                const int np = static_cast<int>(std::min<int64_t>(kAttentionBlock, hi_p - p0));
                for (int hk = 0; hk < H; ++hk) {
                    if (in_place) {
                        kv.attend_f16(global ? globals(cols[hk], head_scratch(sc, hk)) : cols[hk],
                                      p0, np, static_cast<int64_t>(hk) * D, D);
                        continue;
                    }
                    const float *k, *v;
                    const int64_t stride =
                        kv.block(p0, np, static_cast<int64_t>(hk) * D, D, sc.kw, sc.vw, &k, &v);
                    block(global ? globals(cols[hk], head_scratch(sc, hk)) : cols[hk], k, v, stride,
                          p0, np);
                }
            }
        };
        const auto [glo_p, ghi_p] = global_range(slice, n_tokens);
        visit(glo_p, ghi_p, true);
        const TileDraws draws(s, pos0, pos0 + n_tokens - 1);
        for (int b = 0; b < draws.n_blocks; ++b) {
            const auto [rlo_p, rhi_p] = random_range(slice, draws.blocks[b]);
            if (rlo_p >= rhi_p) continue;
            for (int hk = 0; hk < H; ++hk) {
                const Scratch hx = head_scratch(sc, hk);
                random_columns(draws, draws.blocks[b], 0, nq, cols[hk].nqp, hx.glo, hx.ghi);
            }
            visit(rlo_p, rhi_p, true);
        }
        const auto [lo_p, hi_p] = block_range(slice, 0, n_tokens);
        visit(lo_p, hi_p, false);
        for (int hk = 0; hk < H; ++hk) store(slice, 0, hk, nq, head_scratch(sc, hk));
    }

private:
    // A job's working memory; run_heads keeps `heads` sets of the per-column parts (queries,
    // visible ranges, m, l, o) and shares the rest (scores, rescale factors, gathered rows).
    struct Scratch {
        float *qt, *lo, *hi, *m, *l, *slope, *glo, *ghi, *c, *sc, *o, *kw, *vw;
        size_t head_floats;  // distance between two heads' per-column parts
    };

    Scratch scratch(std::vector<float>& buf, int heads, int nq) const {
        const int D = this->D();
        const size_t nqp = static_cast<size_t>((nq + kern.lanes - 1) / kern.lanes * kern.lanes);
        const size_t kv_block =
            kv.gathered && !kv.up_front ? static_cast<size_t>(kAttentionBlock) * D : 0;
        const size_t per_head = nqp * (D + 7) + static_cast<size_t>(nq) * D;
        buf.resize(per_head * heads + nqp * (1 + kAttentionBlock + 8) + 2 * kv_block);
        Scratch x;
        x.head_floats = per_head;
        x.qt = buf.data();
        x.lo = x.qt + nqp * D;
        x.hi = x.lo + nqp;
        x.m = x.hi + nqp;
        x.l = x.m + nqp;
        x.slope = x.l + nqp;
        x.glo = x.slope + nqp;
        x.ghi = x.glo + nqp;
        x.o = x.ghi + nqp;                    // nq * D
        x.c = buf.data() + per_head * heads;  // shared from here on
        x.sc = x.c + nqp;
        x.kw = x.sc + nqp * (kAttentionBlock + 8);  // widened F16 block rows
        x.vw = x.kw + kv_block;
        return x;
    }

    static Scratch head_scratch(Scratch x, int hk) {
        const size_t at = x.head_floats * static_cast<size_t>(hk);
        for (float** p : {&x.qt, &x.lo, &x.hi, &x.m, &x.l, &x.slope, &x.glo, &x.ghi, &x.o})
            *p += at;
        return x;
    }

    // Packs the queries of tokens [t0, t1) and KV head hk into x; zeroes their output.
    AttentionColumns begin(int64_t t0, int64_t t1, int hk, const Scratch& x) const {
        const int D = this->D();
        const int nq = static_cast<int>(t1 - t0) * G();
        const int nqp = (nq + kern.lanes - 1) / kern.lanes * kern.lanes;
        pack_columns(s, q, pos0, t0, hk, nq, nqp, nq * 4 <= kern.lanes, x.qt, x.lo, x.hi, x.m, x.l,
                     x.slope, x.glo, x.ghi);
        std::fill_n(x.o, static_cast<size_t>(nq) * D, 0.0f);
        return AttentionColumns{x.qt,     x.lo, x.hi, x.m, x.l, x.o,
                                x.sc,     x.c,  nq,   nqp, D,   s.alibi ? x.slope : nullptr,
                                s.softcap};
    }

    // The same columns seeing only the global tokens before their windows (pack_columns).
    static AttentionColumns globals(AttentionColumns c, const Scratch& x) {
        c.lo = x.glo;
        c.hi = x.ghi;
        return c;
    }

    // The global positions [lo, hi) slice `slice` visits for tokens before t1 (the columns mask
    // what their windows cover); slice 0 also takes those before the call's first position. No
    // column sees a global position at or past the last token's window start.
    std::pair<int64_t, int64_t> global_range(int64_t slice, int64_t t1) const {
        if (!has_globals(s)) return {0, 0};
        const int64_t lo_p = slice == 0 ? 0 : first_pos + slice * slice_len;
        const int64_t hi_p = std::min(
            {int64_t{s.global_tokens}, pos0 + t1 - s.window, first_pos + (slice + 1) * slice_len});
        return {lo_p, hi_p};
    }

    // The positions [lo, hi) of random block kb in slice `slice` (slice 0 also takes those
    // before the call's first position).
    std::pair<int64_t, int64_t> random_range(int64_t slice, int64_t kb) const {
        const int64_t B = s.random_block_size;
        const int64_t lo_p = std::max(kb * B, slice == 0 ? 0 : first_pos + slice * slice_len);
        return {lo_p, std::min(kb * B + B, first_pos + (slice + 1) * slice_len)};
    }

    // Columns [0, nq) of tokens from t0 see random block kb where their query block drew it
    // ([lo, hi] = the block), nothing otherwise (hi = -1).
    void random_columns(const TileDraws& d, int64_t kb, int64_t t0, int nq, int nqp, float* lo,
                        float* hi) const {
        const int64_t B = s.random_block_size;
        for (int i = 0; i < nqp; ++i) {
            const bool sees = i < nq && d.sees(s, pos0 + t0 + i / G(), kb);
            lo[i] = sees ? static_cast<float>(kb * B) : 0.0f;
            hi[i] = sees ? static_cast<float>(kb * B + B - 1) : -1.0f;
        }
    }

    // The positions [lo, hi) of slice `slice` that some token of [t0, t1) can see.
    std::pair<int64_t, int64_t> block_range(int64_t slice, int64_t t0, int64_t t1) const {
        const int64_t tile_first =
            s.window > 0 ? std::max<int64_t>(0, pos0 + t0 - s.window + 1) : 0;
        const int64_t lo_p = std::max(first_pos + slice * slice_len, tile_first);
        const int64_t hi_p =
            std::min({last_pos + 1, first_pos + (slice + 1) * slice_len, pos0 + t1});
        return {lo_p, hi_p};
    }

    void run_job(int64_t job, const Scratch& x) const {
        const int D = this->D(), G = this->G();
        const int64_t slice = job % n_slices;
        const int hk = static_cast<int>((job / n_slices) % s.n_head_kv);
        // Causal tiles cost in proportion to their position, and parallel_for hands each thread
        // a contiguous run of jobs: taking tiles in the order first, last, second,
        // second-to-last, ... gives every run about the same work (in tile order the last
        // thread got all the long ones).
        const int64_t order = job / n_slices / s.n_head_kv;
        const int64_t tile = order % 2 == 0 ? order / 2 : n_tiles - 1 - order / 2;
        const int64_t t0 = tile * kTileTokens, t1 = std::min(n_tokens, t0 + kTileTokens);
        const int nq = static_cast<int>(t1 - t0) * G;
        const int64_t kv_off = static_cast<int64_t>(hk) * D;

        if (amx) {
            x86::attention_job_amx({q, static_cast<int64_t>(s.n_head) * D, kv.k_rows() + kv_off,
                                    kv.v_rows() + kv_off, kv.stride, kv.rows_first(), t0, t1, pos0,
                                    hk, G, D, s.window, s.scale, x.m, x.l, x.o});
            store(slice, t0, hk, nq, x);
            return;
        }
        const AttentionColumns cols = begin(t0, t1, hk, x);
        const bool row_mode = nq * 4 <= kern.lanes;
        const auto block = row_mode ? kern.block_rows : kern.block;
        const bool in_place = row_mode && kv.f16_in_place();
        const auto visit = [&](const AttentionColumns& c, int64_t lo_p, int64_t hi_p) {
            for (int64_t p0 = lo_p; p0 < hi_p; p0 += kAttentionBlock) {
                const int np = static_cast<int>(std::min<int64_t>(kAttentionBlock, hi_p - p0));
                if (in_place) {
                    kv.attend_f16(c, p0, np, kv_off, D);
                    continue;
                }
                const float *k, *v;
                const int64_t stride = kv.block(p0, np, kv_off, D, x.kw, x.vw, &k, &v);
                block(c, k, v, stride, p0, np);
            }
        };
        const auto [glo_p, ghi_p] = global_range(slice, t1);
        visit(globals(cols, x), glo_p, ghi_p);
        const TileDraws draws(s, pos0 + t0, pos0 + t1 - 1);
        for (int b = 0; b < draws.n_blocks; ++b) {
            const auto [rlo_p, rhi_p] = random_range(slice, draws.blocks[b]);
            if (rlo_p >= rhi_p) continue;
            random_columns(draws, draws.blocks[b], t0, nq, cols.nqp, x.glo, x.ghi);
            visit(globals(cols, x), rlo_p, rhi_p);
        }
        const auto [lo_p, hi_p] = block_range(slice, t0, t1);
        visit(cols, lo_p, hi_p);
        store(slice, t0, hk, nq, x);
    }

    // A job's (m, l, o) per query row into the shared state.
    void store(int64_t slice, int64_t t0, int hk, int nq, const Scratch& x) const {
        const int D = this->D(), G = this->G();
        for (int i = 0; i < nq; ++i) {
            const int64_t t = t0 + i / G;
            const size_t si =
                static_cast<size_t>((slice * n_tokens + t) * s.n_head + hk * G + i % G);
            st[2 * si] = x.m[i];
            st[2 * si + 1] = x.l[i];
            std::copy_n(x.o + static_cast<int64_t>(i) * D, D, acc_all + si * D);
        }
    }
};

// How one call is cut into jobs; a sequence of a batch (attention_paged_batch) is cut the same
// way as alone, so its results are the same bits.
struct CallCut {
    int64_t n_tiles, first_pos, last_pos;
    int64_t span;  // positions any token of the call may see, from first_pos
    int64_t n_slices, slice_len;
    bool amx;
};

CallCut cut_call(const AttentionShape& s, int64_t n_tokens, int64_t pos0, int threads, Isa isa,
                 bool lse) {
    CallCut c;
    c.n_tiles = (n_tokens + kTileTokens - 1) / kTileTokens;
    c.last_pos = pos0 + n_tokens - 1;
    c.first_pos = s.window > 0 ? std::max<int64_t>(0, pos0 - s.window + 1) : 0;
    c.span = c.last_pos - c.first_pos + 1;
    // Position slices: only when the (tile, head) jobs cannot keep every thread busy.
    c.n_slices = 1;
    const int64_t jobs = c.n_tiles * s.n_head_kv;
    if (jobs < threads)
        c.n_slices = std::clamp<int64_t>((threads + jobs - 1) / jobs, 1,
                                         std::max<int64_t>(1, c.span / kMinSlice));
    c.slice_len = (c.span + c.n_slices - 1) / c.n_slices;
    // Prefill on the AMX tiles where they measured faster (use_amx_attention) and the caller
    // allows bf16 products, over contiguous f32 rows (a F32 cache, or the span widened up front)
    // and one slice; training's forward (lse) stays f32, its backward rebuilds the
    // probabilities. Decided before the call takes its thread_local buffers: the first decision
    // measures both kernels through attention_impl on this thread, which resizes those same
    // buffers (taken after it, a 64-token prefill of 12 heads wrote through freed memory).
    c.amx = s.bf16_products && !lse && !s.alibi && s.softcap == 0 && !has_globals(s) &&
            !has_random_blocks(s) && c.n_slices == 1 &&
            n_tokens * (s.n_head / s.n_head_kv) >= kAmxMinRows && isa == Isa::Avx512 &&
            use_amx_attention(s.head_dim);
    return c;
}

// The caches' types, K's and V's: float types, or blocks that no head's columns straddle.
void check_cache_type(const AttentionShape& s, DType t, const char* which) {
    SYSLM_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16 ||
                    (dtype_info(t).quantized && has_type_traits(t) && !dtype_info(t).runtime_only &&
                     dtype_info(t).block_size <= 32),
                "attention: ", which, " cache type ", dtype_name(t), " is not supported");
    SYSLM_CHECK(s.head_dim % dtype_info(t).block_size == 0, "attention: a ", which,
                " cache of type ", dtype_name(t), " needs heads of a multiple of ",
                dtype_info(t).block_size, " elements; this model's have ", s.head_dim);
}

// F16 and quantized caches: a prefill of several tiles would widen every block once per tile,
// so the visible span is widened once, up front, for all tiles (span x kv_stride floats, K and
// V); decode widens block by block inside its jobs. Paged caches go the same way (F32 rows
// copied instead of widened), so the block kernels always see contiguous rows.
KvRows kv_rows(const AttentionKernels& kern, const AttentionShape& s, const void* k_cache,
               const void* v_cache, const KvPagesView* paged, const CallCut& c) {
    check_cache_type(s, s.k_type, "key");
    check_cache_type(s, s.v_type, "value");
    // ALiBi reads a column's query position from its hi, which the global columns change.
    SYSLM_CHECK((!has_globals(s) && !has_random_blocks(s)) || !s.alibi,
                "attention: global tokens and random blocks do not combine with ALiBi");
    const bool gathered = s.k_type != DType::F32 || s.v_type != DType::F32 || paged != nullptr;
    return KvRows{&kern, cache_rows_of(s.k_type, s.kv_stride, kern.isa),
                  cache_rows_of(s.v_type, s.kv_stride, kern.isa), k_cache, v_cache,
                  paged ? paged->k : nullptr, paged ? paged->v : nullptr,
                  paged ? paged->page_size : 0, s.kv_stride, gathered,
                  // The span widened up front starts at the window: global rows and random blocks
                  // come block by block.
                  gathered && (c.n_tiles > 1 || c.amx) && !has_globals(s) && !has_random_blocks(s)};
}

void attention_impl(const AttentionShape& s, const float* q, const void* k_cache,
                    const void* v_cache, const KvPagesView* paged, int64_t n_tokens, int64_t pos0,
                    float* out, ThreadPool& pool, Isa isa, float* lse) {
    const AttentionKernels& kern = attention_kernels(isa);
    const CallCut c = cut_call(s, n_tokens, pos0, pool.size(), isa, lse != nullptr);
    KvRows kv = kv_rows(kern, s, k_cache, v_cache, paged, c);

    // Per (slice, token, head): partial state (m, l) and unnormalised output.
    const size_t n_state = static_cast<size_t>(c.n_slices * n_tokens * s.n_head);
    thread_local std::vector<float> state;
    thread_local std::vector<float> accs;
    state.resize(2 * n_state);
    accs.resize(n_state * s.head_dim);
    thread_local std::vector<float> wide;  // the caller's: workers see it through kv
    if (kv.up_front) kv.widen_span(c.first_pos, c.span, wide, pool);

    const AttentionJobs aj{s,          kern,      kv,           q,           n_tokens,
                           pos0,       c.n_tiles, c.n_slices,   c.slice_len, c.first_pos,
                           c.last_pos, c.amx,     state.data(), accs.data()};
    pool.parallel_for(c.n_tiles * s.n_head_kv * c.n_slices,
                      [&](int64_t b, int64_t e, int) { aj.run(b, e); });
    merge_slices(s, n_tokens, c.n_slices, state.data(), accs.data(), out, lse);
}

void attention_paged_batch(const AttentionShape& s, std::span<const PagedSequence> seqs,
                           ThreadPool& pool, Isa isa) {
    const AttentionKernels& kern = attention_kernels(isa);
    // Short sequences (one query tile, not on AMX: a decode step's) share one pool loop of
    // (sequence, slice) jobs when there are enough of them to keep every thread busy; the rest
    // run as calls of their own.
    // Per-call lists are thread_local like the state below: a step allocates nothing.
    thread_local std::vector<size_t> shared;
    thread_local std::vector<CallCut> cuts;
    thread_local std::vector<AttentionShape> shapes;  // each sequence's (its own window)
    shared.clear();
    cuts.clear();
    shapes.assign(seqs.size(), s);
    for (size_t i = 0; i < seqs.size(); ++i) {
        const PagedSequence& q = seqs[i];
        SYSLM_CHECK(q.kv.page_size > 0 && q.kv.k && q.kv.v, "attention: empty page view");
        if (s.window > 0 && q.window > 0) shapes[i].window = q.window;
        cuts.push_back(cut_call(shapes[i], q.n_tokens, q.pos0, pool.size(), isa, false));
        if (cuts.back().n_tiles == 1 && !cuts.back().amx) shared.push_back(cuts.size() - 1);
    }
    if (shared.size() < 2 * static_cast<size_t>(pool.size())) shared.clear();
    for (size_t i = 0, next = 0; i < seqs.size(); ++i) {
        if (next < shared.size() && shared[next] == i) {
            ++next;
            continue;
        }
        attention_impl(shapes[i], seqs[i].q, nullptr, nullptr, &seqs[i].kv, seqs[i].n_tokens,
                       seqs[i].pos0, seqs[i].out, pool, isa, nullptr);
    }
    if (shared.empty()) return;

    thread_local std::vector<float> state, accs;
    thread_local std::vector<KvRows> kvs;
    thread_local std::vector<AttentionJobs> jobs;
    thread_local std::vector<size_t> at;  // each sequence's first state entry
    at.assign(shared.size() + 1, 0);
    for (size_t j = 0; j < shared.size(); ++j) {
        const CallCut& c = cuts[shared[j]];
        at[j + 1] = at[j] + static_cast<size_t>(c.n_slices * seqs[shared[j]].n_tokens * s.n_head);
    }
    state.resize(2 * at.back());
    accs.resize(at.back() * s.head_dim);
    kvs.clear();
    kvs.reserve(shared.size());  // jobs hold references into it
    jobs.clear();
    struct Work {
        size_t job;
        int64_t slice, cost;
    };
    thread_local std::vector<Work> work;
    work.clear();
    for (size_t j = 0; j < shared.size(); ++j) {
        const PagedSequence& q = seqs[shared[j]];
        const CallCut& c = cuts[shared[j]];
        const AttentionShape& sh = shapes[shared[j]];
        kvs.push_back(kv_rows(kern, sh, nullptr, nullptr, &q.kv, c));
        jobs.push_back(AttentionJobs{sh, kern, kvs.back(), q.q, q.n_tokens, q.pos0, c.n_tiles,
                                     c.n_slices, c.slice_len, c.first_pos, c.last_pos, false,
                                     state.data() + 2 * at[j], accs.data() + at[j] * s.head_dim});
        for (int64_t sl = 0; sl < c.n_slices; ++sl) work.push_back({j, sl, c.slice_len});
    }
    // Longest first, handed out one at a time: sequences differ in length.
    std::stable_sort(work.begin(), work.end(),
                     [](const Work& a, const Work& b) { return a.cost > b.cost; });
    std::atomic<size_t> next{0};
    // A worker naming `jobs` or `work` would get its own thread_local: the lambda takes these.
    const std::vector<AttentionJobs>& my_jobs = jobs;
    const std::vector<Work>& my_work = work;
    pool.parallel_for(pool.size(), [&](int64_t, int64_t, int) {
        for (size_t w; (w = next.fetch_add(1, std::memory_order_relaxed)) < my_work.size();)
            my_jobs[my_work[w].job].run_heads(my_work[w].slice);
    });
    for (size_t j = 0; j < shared.size(); ++j) {
        const PagedSequence& q = seqs[shared[j]];
        merge_slices(s, q.n_tokens, cuts[shared[j]].n_slices, state.data() + 2 * at[j],
                     accs.data() + at[j] * s.head_dim, q.out, nullptr);
    }
}

}  // namespace

}  // namespace syslm::kernels
