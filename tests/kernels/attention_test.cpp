// The attention kernel against a dense reference that materialises the whole masked T x T score
// matrix (the formulation the kernel avoids), on awkward sizes, GQA and sliding windows, for
// every kernel variant this CPU supports (scalar, AVX2, AVX-512), over F32, F16 and quantized
// caches (the reference then reads the values the cache holds, widened: the kernel must add no
// error of its own).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "../common/isas.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::kernels {
namespace {

// Whether the query at position qp sees position p through BigBird's random blocks.
bool sees_random(const AttentionShape& s, int64_t qp, int64_t p) {
    if (s.window == 0 || s.random_blocks == 0) return false;
    int64_t drawn[kMaxRandomBlocks];
    const int n = random_key_blocks(s, qp / s.random_block_size, drawn);
    return std::find(drawn, drawn + n, p / s.random_block_size) != drawn + n;
}

std::vector<float> dense_reference(const AttentionShape& s, const std::vector<float>& q,
                                   const std::vector<float>& k, const std::vector<float>& v,
                                   int64_t n_tokens, int64_t pos0) {
    const int64_t total = pos0 + n_tokens;
    std::vector<float> out(q.size());
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int h = 0; h < s.n_head; ++h) {
            const int hk = h / (s.n_head / s.n_head_kv);
            std::vector<double> score(total);
            for (int64_t p = 0; p < total; ++p) {
                const int64_t qp = pos0 + t;
                const bool visible = p <= qp && (s.window == 0 || qp - p < s.window ||
                                                 p < s.global_tokens || sees_random(s, qp, p));
                double dot = 0;
                for (int d = 0; d < s.head_dim; ++d)
                    dot += double(q[(t * s.n_head + h) * s.head_dim + d]) *
                           k[p * s.kv_stride + hk * s.head_dim + d];
                const double bias = s.alibi ? double(s.alibi[h]) * double(p - qp) : 0.0;
                double scaled = dot * s.scale;
                if (s.softcap > 0) scaled = s.softcap * std::tanh(scaled / s.softcap);
                score[p] = visible ? scaled + bias : -INFINITY;
            }
            double mx = -INFINITY, sum = 0;
            for (double x : score) mx = std::max(mx, x);
            for (double& x : score) sum += (x = std::exp(x - mx));
            for (int d = 0; d < s.head_dim; ++d) {
                double acc = 0;
                for (int64_t p = 0; p < total; ++p)
                    acc += score[p] / sum * v[p * s.kv_stride + hk * s.head_dim + d];
                out[(t * s.n_head + h) * s.head_dim + d] = static_cast<float>(acc);
            }
        }
    return out;
}

// x as f16, and x rounded to those values in place (so that F32 and F16 caches hold the same).
std::vector<uint16_t> to_f16_in_place(std::vector<float>& x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        h[i] = f32_to_f16(x[i]);
        x[i] = f16_to_f32(h[i]);
    }
    return h;
}

// x in a cache of `type` (rows of `row` elements), and x rounded in place to the values that
// cache holds (so that the reference reads what the kernel reads).
std::vector<uint8_t> to_type_in_place(DType type, std::vector<float>& x, int64_t row) {
    if (type == DType::F32) {
        std::vector<uint8_t> b(x.size() * 4);
        std::memcpy(b.data(), x.data(), b.size());
        return b;
    }
    const TypeTraits& tt = type_traits(type, Isa::Scalar);
    const int64_t rows = static_cast<int64_t>(x.size()) / row;
    const size_t rb = row_bytes(type, row);
    std::vector<uint8_t> b(static_cast<size_t>(rows) * rb);
    for (int64_t r = 0; r < rows; ++r) {
        tt.from_float_fast(x.data() + r * row, b.data() + r * rb, row);
        tt.to_float(b.data() + r * rb, x.data() + r * row, row);
    }
    return b;
}

// The caches' element types of a case: K's and V's.
struct KvTypes {
    DType k = DType::F32, v = DType::F32;
    KvTypes() = default;
    KvTypes(DType both) : k(both), v(both) {}  // NOLINT: one type for both
    KvTypes(DType k_type, DType v_type) : k(k_type), v(v_type) {}
};

struct Case {
    int n_head, n_head_kv, head_dim, window;
    int64_t n_tokens, pos0;
    int global = 0;               // global tokens (with a window)
    int random = 0, rblock = 16;  // BigBird's random blocks (with a window) and their size
};

void check_case(const Case& c, Isa isa, int threads, std::mt19937& rng, KvTypes kv = {},
                float alibi_bias = 0.0f, float softcap = 0.0f) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    ThreadPool pool(threads);
    AttentionShape s{c.n_head,   c.n_head_kv,
                     c.head_dim, int64_t(c.n_head_kv) * c.head_dim,
                     c.window,   1.0f / std::sqrt(float(c.head_dim)),
                     kv.k,       kv.v};
    const std::vector<float> slopes = alibi_slopes(c.n_head, alibi_bias);
    if (alibi_bias > 0) s.alibi = slopes.data();
    s.softcap = softcap;
    s.global_tokens = c.global;
    s.random_blocks = c.random;
    s.random_block_size = c.rblock;
    s.random_seed = 0x5eed0000u + static_cast<uint64_t>(c.n_tokens);
    const int64_t total = c.pos0 + c.n_tokens;
    std::vector<float> q(c.n_tokens * c.n_head * c.head_dim), k(total * s.kv_stride),
        v(total * s.kv_stride), out(q.size());
    for (auto* vec : {&q, &k, &v})
        for (auto& x : *vec) x = d(rng);
    // Exactly sized buffers: a read past the cache's last position would be caught by ASan.
    if (kv.k == DType::F32 && kv.v == DType::F32) {
        attention(s, q.data(), k.data(), v.data(), c.n_tokens, c.pos0, out.data(), pool, isa);
    } else {
        const std::vector<uint8_t> kc = to_type_in_place(kv.k, k, s.kv_stride),
                                   vc = to_type_in_place(kv.v, v, s.kv_stride);
        attention(s, q.data(), kc.data(), vc.data(), c.n_tokens, c.pos0, out.data(), pool, isa);
    }
    const auto ref = dense_reference(s, q, k, v, c.n_tokens, c.pos0);
    for (size_t i = 0; i < out.size(); ++i)
        ASSERT_NEAR(out[i], ref[i], 2e-5f * (1 + std::fabs(ref[i])))
            << isa_name(isa) << " threads " << threads << " heads " << c.n_head << "/"
            << c.n_head_kv << " dim " << c.head_dim << " window " << c.window << " tokens "
            << c.n_tokens << " pos0 " << c.pos0 << " kv " << dtype_name(kv.k) << "/"
            << dtype_name(kv.v) << " ALiBi " << alibi_bias << " softcap " << softcap << " global "
            << c.global << " random " << c.random << "x" << c.rblock << " at " << i;
}

// Global tokens before a window: fewer than, as many as and more than a position block, inside
// and past the window; prefill of several tiles, decode (row mode, MHA, and position slices
// over long caches with one KV head), prompts continuing a cache, F32 and F16, soft-capping.
TEST(Attention, GlobalTokensMatchDenseReference) {
    std::mt19937 rng(37);
    for (Isa isa : syslm::testing::supported_isas())
        for (const Case c :
             {Case{4, 2, 12, 7, 40, 0, 3}, Case{4, 1, 10, 5, 23, 0, 1},
              Case{6, 2, 16, 30, 150, 0, 64}, Case{4, 2, 8, 70, 37, 100, 90},
              Case{12, 12, 20, 40, 1, 300, 4}, Case{4, 1, 16, 50, 1, 900, 70},
              Case{8, 2, 12, 300, 1, 1200, 130}, Case{5, 5, 20, 30, 2, 90, 2},
              Case{3, 3, 14, 8, 65, 129, 200},
              // decode split into position slices, global tokens in several
              Case{4, 1, 16, 600, 1, 1200, 1000}, Case{2, 1, 8, 300, 1, 2000, 1500}}) {
            check_case(c, isa, 1, rng);
            check_case(c, isa, 3, rng);
            check_case(c, isa, 2, rng, DType::F16);
            check_case(c, isa, 2, rng, DType::F32, 0.0f, 1.5f);
        }
}

// BigBird's draw: distinct blocks, ascending, all of them candidates (after the global tokens,
// before the first query's window), min(R, candidates) of them, the same on every call, and
// spread: over many query blocks each candidate is drawn about as often as the others.
TEST(Attention, RandomKeyBlocksAreDistinctCandidatesSpreadEvenly) {
    AttentionShape s{4, 2, 8, 16, 40, 0.35f};
    s.global_tokens = 20;
    s.random_blocks = 3;
    s.random_block_size = 16;
    s.random_seed = 99;
    std::vector<int> hits(64);
    int64_t a[kMaxRandomBlocks], b[kMaxRandomBlocks];
    for (int64_t qb = 0; qb < 4000; ++qb) {
        const int64_t c0 = 2, c1 = std::max<int64_t>(c0, (qb * 16 - 40 + 1) / 16);  // qb >= 3
        const int n = random_key_blocks(s, qb, a);
        ASSERT_EQ(n, std::min<int64_t>(3, c1 - c0)) << qb;
        ASSERT_EQ(random_key_blocks(s, qb, b), n);
        for (int i = 0; i < n; ++i) {
            ASSERT_EQ(a[i], b[i]);
            ASSERT_GE(a[i], c0);
            ASSERT_LT(a[i], c1);
            if (i > 0) {
                ASSERT_LT(a[i - 1], a[i]);
            }
            if (qb == 66 + 2) ++hits[a[i]];  // 64 candidates: one query block
        }
    }
    // Query blocks with exactly 64 candidates would be one draw each; instead count over the
    // first 64 candidates across many query blocks: each of 3 of n is drawn with chance 3 / n.
    std::vector<double> freq(64);
    for (int64_t qb = 500; qb < 4000; ++qb) {
        const int n = random_key_blocks(s, qb, a);
        const double cand = static_cast<double>(std::max<int64_t>(2, (qb * 16 - 39) / 16) - 2);
        for (int i = 0; i < n; ++i)
            if (a[i] < 2 + 64) freq[a[i] - 2] += cand / 3;  // expected 1 per query block
    }
    // 3500 query blocks: each candidate's weighted count is 3500 +- about 4 sigma (sqrt of the
    // variance of a sum of Bernoulli(3 / n) scaled by n / 3: at most about 3500 * 1000 / 3).
    for (int i = 0; i < 64; ++i)
        EXPECT_NEAR(freq[i], 3500.0, 4 * std::sqrt(3500.0 * 1400 / 3)) << i;
    // A layer's seed changes the draw.
    s.random_seed = 100;
    int differ = 0;
    for (int64_t qb = 100; qb < 200; ++qb) {
        random_key_blocks(s, qb, a);
        s.random_seed = 99;
        random_key_blocks(s, qb, b);
        s.random_seed = 100;
        differ += !std::equal(a, a + 3, b);
    }
    EXPECT_GT(differ, 80);
}

// Random blocks with and without global tokens: blocks of 16 and 24 (not a multiple of the
// kernels' 64-position blocks), prefill of several tiles (tiles spanning several query blocks),
// decode (row mode, position slices over long caches), prompts continuing a cache, F32 and F16,
// soft-capping.
TEST(Attention, RandomBlocksMatchDenseReference) {
    std::mt19937 rng(41);
    for (Isa isa : syslm::testing::supported_isas())
        for (const Case c :
             {Case{4, 2, 12, 20, 150, 0, 0, 2, 16}, Case{4, 1, 10, 33, 200, 0, 5, 3, 24},
              Case{6, 3, 16, 16, 90, 70, 0, 4, 16}, Case{8, 2, 12, 40, 1, 900, 0, 3, 16},
              Case{4, 4, 20, 30, 1, 1200, 30, 2, 64}, Case{2, 1, 8, 64, 3, 2000, 0, 8, 32},
              Case{5, 5, 20, 17, 70, 300, 9, 5, 17}}) {
            check_case(c, isa, 1, rng);
            check_case(c, isa, 3, rng);
            check_case(c, isa, 2, rng, DType::F16);
            check_case(c, isa, 2, rng, DType::F32, 0.0f, 1.5f);
        }
}

TEST(Attention, GlobalTokensRefuseAlibi) {
    const std::vector<float> slopes = alibi_slopes(2, 8.0f);
    AttentionShape s{2, 2, 8, 16, 4, 0.35f};
    s.alibi = slopes.data();
    s.global_tokens = 2;
    std::vector<float> q(2 * 16, 0.5f), k(2 * 16, 0.25f), v(2 * 16, 1.0f), out(q.size());
    ThreadPool pool(1);
    EXPECT_THROW(attention(s, q.data(), k.data(), v.data(), 2, 0, out.data(), pool), Error);
}

TEST(Attention, MatchesDenseMaskedReference) {
    std::mt19937 rng(3);
    for (Isa isa : syslm::testing::supported_isas())
        for (const Case c :
             {Case{6, 2, 12, 0, 19, 0}, Case{6, 2, 12, 0, 1, 37}, Case{4, 1, 10, 7, 23, 0},
              Case{4, 4, 8, 5, 3, 29}, Case{3, 3, 14, 64, 17, 5},
              // several query tiles, a window cutting through position blocks
              Case{4, 2, 8, 70, 37, 100},
              // decode over long caches: positions split across threads and merged
              Case{4, 1, 16, 0, 1, 700}, Case{8, 2, 12, 300, 1, 900}, Case{2, 1, 6, 0, 2, 1200}})
            for (DType kv : {DType::F32, DType::F16}) check_case(c, isa, 2, rng, kv);
}

// Shapes of the benchmark models (head_dim 64: whole vectors, GQA 8 and MHA) and awkward ones:
// head_dim not a multiple of 8 or 16, column counts just past a vector (G * tokens = 17, 33),
// prompts continuing a cache at a block boundary and across several blocks, 1 and 3 threads.
TEST(Attention, ModelShapesAndVectorTails) {
    std::mt19937 rng(11);
    for (Isa isa : syslm::testing::supported_isas())
        for (const Case c :
             {Case{16, 2, 64, 0, 77, 0}, Case{4, 4, 64, 0, 150, 64}, Case{16, 2, 64, 0, 1, 333},
              Case{17, 17, 24, 0, 2, 63}, Case{33, 1, 20, 0, 1, 130}, Case{6, 3, 72, 50, 40, 129},
              Case{2, 2, 130, 0, 5, 70}, Case{5, 1, 9, 100, 33, 450},
              // few columns per job (row mode on AVX2 / AVX-512): MHA decode, a short prompt
              // continuing a cache, windows, head_dim tails, a cache shorter than one vector
              Case{12, 12, 64, 0, 1, 200}, Case{5, 5, 20, 30, 2, 90}, Case{3, 3, 64, 0, 1, 5},
              Case{4, 2, 36, 10, 1, 300}, Case{6, 6, 64, 40, 4, 1000}}) {
            check_case(c, isa, 1, rng);
            check_case(c, isa, 3, rng);
            check_case(c, isa, 2, rng, DType::F16);
        }
}

// A paged cache (pages of 16 and of 5 positions, shuffled in memory) gives exactly the contiguous
// cache's output, F32 and F16, decode and prefill, windows, GQA, every ISA.
// llama.cpp's cache types (--cache-type-k / -v): the kernel reads exactly the values the
// blocks hold, K and V each in its own type, prefill (widened up front) and decode (block by
// block), with windows, GQA and vector tails.
TEST(Attention, QuantizedCachesMatchTheValuesTheyHold) {
    std::mt19937 rng(29);
    const KvTypes types[] = {{DType::Q8_0, DType::Q8_0}, {DType::Q4_0, DType::Q4_0},
                             {DType::Q8_0, DType::F16},  {DType::F16, DType::Q4_0},
                             {DType::Q5_1, DType::Q4_1}, {DType::Q5_0, DType::BF16},
                             {DType::BF16, DType::F32}};
    for (Isa isa : syslm::testing::supported_isas())
        for (const Case c :
             {Case{4, 2, 32, 0, 1, 77}, Case{6, 2, 64, 0, 131, 0}, Case{8, 2, 128, 50, 97, 20},
              Case{3, 1, 96, 0, 1, 300}, Case{4, 4, 32, 0, 70, 45}})
            for (const KvTypes& kv : types) check_case(c, isa, 2, rng, kv);
}

// A head whose columns a block would straddle is refused, naming the sizes.
TEST(Attention, QuantizedCacheRefusesHeadsOfPartialBlocks) {
    AttentionShape s{2, 1, 16, 16, 0, 0.25f, DType::Q8_0, DType::F16};
    std::vector<float> q(32), out(32);
    std::vector<uint8_t> k(1024), v(1024);
    ThreadPool pool(1);
    try {
        attention(s, q.data(), k.data(), v.data(), 1, 0, out.data(), pool);
        FAIL() << "a Q8_0 cache of 16-element heads was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("multiple of 32"), std::string::npos) << e.what();
    }
}

TEST(Attention, PagedCacheEqualsContiguousBitForBit) {
    std::mt19937 rng(17);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (Isa isa : syslm::testing::supported_isas())
        for (const Case c :
             {Case{6, 2, 12, 0, 1, 37}, Case{4, 1, 16, 0, 1, 700}, Case{4, 2, 8, 70, 37, 100},
              Case{8, 8, 64, 0, 3, 130}, Case{4, 2, 8, 30, 37, 100, 20},
              Case{4, 1, 16, 40, 1, 700, 70}, Case{4, 2, 8, 30, 70, 150, 5, 3, 16},
              Case{4, 1, 16, 40, 1, 700, 0, 4, 32}, Case{4, 2, 32, 30, 37, 100, 20},
              Case{2, 1, 64, 40, 1, 300, 0, 4, 32}})
            for (KvTypes kv :
                 {KvTypes(DType::F32), KvTypes(DType::F16), KvTypes(DType::Q8_0, DType::Q4_0)})
                for (int page : {16, 5}) {
                    if (c.head_dim % dtype_info(kv.k).block_size != 0) continue;
                    ThreadPool pool(2);
                    AttentionShape s{c.n_head,   c.n_head_kv,
                                     c.head_dim, int64_t(c.n_head_kv) * c.head_dim,
                                     c.window,   1.0f / std::sqrt(float(c.head_dim)),
                                     kv.k,       kv.v};
                    s.global_tokens = c.global;
                    s.random_blocks = c.random;
                    s.random_block_size = c.rblock;
                    s.random_seed = 7;
                    const int64_t total = c.pos0 + c.n_tokens, n_pages = (total + page - 1) / page;
                    std::vector<float> kf(total * s.kv_stride), vf(kf.size());
                    for (auto* buf : {&kf, &vf})
                        for (float& x : *buf) x = nd(rng);
                    const std::vector<uint8_t> kc = to_type_in_place(kv.k, kf, s.kv_stride),
                                               vc = to_type_in_place(kv.v, vf, s.kv_stride);
                    const size_t krow = kc.size() / total, vrow = vc.size() / total;
                    // The same rows in pages placed in reverse order in one pool.
                    std::vector<uint8_t> kp(n_pages * page * krow), vp(n_pages * page * vrow);
                    std::vector<const void*> kptr(n_pages), vptr(n_pages);
                    for (int64_t i = 0; i < n_pages; ++i) {
                        const int64_t slot = n_pages - 1 - i;
                        const int64_t rows = std::min<int64_t>(page, total - i * page);
                        std::memcpy(kp.data() + slot * page * krow, kc.data() + i * page * krow,
                                    rows * krow);
                        std::memcpy(vp.data() + slot * page * vrow, vc.data() + i * page * vrow,
                                    rows * vrow);
                        kptr[i] = kp.data() + slot * page * krow;
                        vptr[i] = vp.data() + slot * page * vrow;
                    }
                    std::vector<float> q(c.n_tokens * c.n_head * c.head_dim), a(q.size()),
                        b(q.size());
                    for (auto& x : q) x = nd(rng);
                    attention(s, q.data(), kc.data(), vc.data(), c.n_tokens, c.pos0, a.data(), pool,
                              isa);
                    attention_paged(s, q.data(), {kptr.data(), vptr.data(), page}, c.n_tokens,
                                    c.pos0, b.data(), pool, isa);
                    for (size_t i = 0; i < a.size(); ++i)
                        ASSERT_EQ(a[i], b[i])
                            << isa_name(isa) << " " << dtype_name(kv.k) << "/" << dtype_name(kv.v)
                            << " page " << page << " tokens " << c.n_tokens << " at " << i;
                }
}

// An F16 cache gives exactly the output of an F32 cache holding the same values: decode reads
// the f16 rows in place and prefill widens them, and either way the arithmetic is the F32
// cache's. Decode (row mode, head tails, windows, position slices) and a prefill, every ISA.
TEST(Attention, F16CacheEqualsF32CacheOfTheSameValuesBitForBit) {
    std::mt19937 rng(23);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (Isa isa : syslm::testing::supported_isas())
        for (const Case c :
             {Case{6, 2, 36, 0, 1, 150}, Case{4, 1, 20, 0, 1, 700}, Case{4, 4, 64, 50, 1, 130},
              Case{2, 2, 12, 0, 2, 67}, Case{4, 2, 16, 0, 37, 100}}) {
            ThreadPool pool(2);
            AttentionShape s{c.n_head,   c.n_head_kv,
                             c.head_dim, int64_t(c.n_head_kv) * c.head_dim,
                             c.window,   1.0f / std::sqrt(float(c.head_dim))};
            const int64_t total = c.pos0 + c.n_tokens;
            std::vector<float> kf(total * s.kv_stride), vf(kf.size()),
                q(c.n_tokens * c.n_head * c.head_dim), a(q.size()), b(q.size());
            for (auto* buf : {&kf, &vf, &q})
                for (float& x : *buf) x = nd(rng);
            const std::vector<uint16_t> kh = to_f16_in_place(kf), vh = to_f16_in_place(vf);
            attention(s, q.data(), kf.data(), vf.data(), c.n_tokens, c.pos0, a.data(), pool, isa);
            s.k_type = s.v_type = DType::F16;
            attention(s, q.data(), kh.data(), vh.data(), c.n_tokens, c.pos0, b.data(), pool, isa);
            for (size_t i = 0; i < a.size(); ++i)
                ASSERT_EQ(a[i], b[i])
                    << isa_name(isa) << " heads " << c.n_head << "/" << c.n_head_kv << " dim "
                    << c.head_dim << " tokens " << c.n_tokens << " at " << i;
        }
}

// A serving step's batch of sequences (attention_paged over a span): every sequence's output is
// the contiguous cache's, bit for bit, whether it joins the shared decode loop (one query tile,
// heads inside the job, enough sequences to fill the pool) or runs as a call of its own; row and
// column mode, position slices (one KV head, long caches), windows, F32 and F16, pool sizes.
TEST(Attention, PagedBatchEqualsOneCallPerSequence) {
    std::mt19937 rng(23);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    struct Shape {
        int n_head, n_head_kv, head_dim, window;
        int global = 0;
        int random = 0;  // random blocks of 16
    };
    struct Seq {
        int64_t n_tokens, pos0;
    };
    const std::vector<Seq> seqs{{1, 0},  {1, 40},  {1, 700}, {3, 97},  {70, 13}, {1, 300},
                                {1, 64}, {2, 511}, {1, 5},   {1, 129}, {1, 1030}};
    for (Isa isa : syslm::testing::supported_isas())
        for (const Shape sh :
             {Shape{8, 8, 32, 0}, Shape{16, 2, 24, 0}, Shape{4, 1, 20, 0}, Shape{6, 3, 64, 90},
              Shape{4, 1, 20, 60, 17}, Shape{4, 2, 16, 40, 3, 3}})
            for (DType kv : {DType::F32, DType::F16})
                for (int threads : {1, 2, 3}) {
                    ThreadPool pool(threads);
                    AttentionShape s{sh.n_head,   sh.n_head_kv,
                                     sh.head_dim, int64_t(sh.n_head_kv) * sh.head_dim,
                                     sh.window,   1.0f / std::sqrt(float(sh.head_dim)),
                                     kv,          kv};
                    s.global_tokens = sh.global;
                    s.random_blocks = sh.random;
                    s.random_block_size = 16;
                    s.random_seed = 11;
                    const size_t elem = kv == DType::F16 ? 2 : 4, page = 16;
                    const size_t row = static_cast<size_t>(s.kv_stride) * elem;
                    const int64_t q_dim = int64_t(sh.n_head) * sh.head_dim;
                    // Per sequence: a contiguous cache, its pages (reversed in one buffer), q.
                    std::vector<std::vector<uint8_t>> kc, vc, kp, vp;
                    std::vector<std::vector<const void*>> kptr, vptr;
                    std::vector<std::vector<float>> q, expect, got;
                    for (const Seq& sq : seqs) {
                        const size_t total = static_cast<size_t>(sq.pos0 + sq.n_tokens);
                        const size_t n_pages = (total + page - 1) / page;
                        for (auto* cache : {&kc, &vc}) {
                            cache->emplace_back(total * row);
                            auto& buf = cache->back();
                            for (size_t i = 0; i < buf.size() / elem; ++i) {
                                const float x = nd(rng);
                                if (kv == DType::F16) {
                                    const uint16_t h = f32_to_f16(x);
                                    std::memcpy(buf.data() + 2 * i, &h, 2);
                                } else {
                                    std::memcpy(buf.data() + 4 * i, &x, 4);
                                }
                            }
                        }
                        for (auto [pages, ptrs, cache] : {std::tuple{&kp, &kptr, &kc.back()},
                                                          std::tuple{&vp, &vptr, &vc.back()}}) {
                            pages->emplace_back(n_pages * page * row);
                            ptrs->emplace_back(n_pages);
                            for (size_t i = 0; i < n_pages; ++i) {
                                const size_t slot = n_pages - 1 - i;
                                const size_t rows = std::min(page, total - i * page);
                                std::memcpy(pages->back().data() + slot * page * row,
                                            cache->data() + i * page * row, rows * row);
                                ptrs->back()[i] = pages->back().data() + slot * page * row;
                            }
                        }
                        q.emplace_back(sq.n_tokens * q_dim);
                        for (auto& x : q.back()) x = nd(rng);
                        expect.emplace_back(q.back().size());
                        got.emplace_back(q.back().size(), -7.0f);
                        attention(s, q.back().data(), kc.back().data(), vc.back().data(),
                                  sq.n_tokens, sq.pos0, expect.back().data(), pool, isa);
                    }
                    std::vector<PagedSequence> batch;
                    for (size_t i = 0; i < seqs.size(); ++i)
                        batch.push_back({{kptr[i].data(), vptr[i].data(), int(page)},
                                         q[i].data(),
                                         got[i].data(),
                                         seqs[i].n_tokens,
                                         seqs[i].pos0});
                    attention_paged(s, batch, pool, isa);
                    for (size_t i = 0; i < seqs.size(); ++i)
                        for (size_t j = 0; j < got[i].size(); ++j)
                            ASSERT_EQ(got[i][j], expect[i][j])
                                << isa_name(isa) << " " << dtype_name(kv) << " threads " << threads
                                << " heads " << sh.n_head << "/" << sh.n_head_kv << " sequence "
                                << i << " at " << j;
                }
}

// ALiBi's per-head bias on the scores, column and row mode (GQA groups and MHA decode), prefill
// and decode, slices, windows, head counts that are and are not powers of two.
TEST(Attention, AlibiMatchesDenseReference) {
    std::mt19937 rng(29);
    for (Isa isa : syslm::testing::supported_isas())
        for (const Case c :
             {Case{8, 8, 32, 0, 1, 300}, Case{12, 12, 20, 0, 37, 0}, Case{6, 2, 16, 0, 70, 5},
              Case{5, 1, 24, 40, 1, 700}, Case{4, 4, 16, 0, 3, 90}}) {
            check_case(c, isa, 1, rng, DType::F32, 8.0f);
            check_case(c, isa, 3, rng, DType::F16, 8.0f);
        }
}

// Gemma 2's soft-capping of the scores (caps low enough to bend most of them), column and row
// mode, prefill and decode, slices, windows, F32 and F16 caches, with ALiBi too.
TEST(Attention, SoftcapMatchesDenseReference) {
    std::mt19937 rng(31);
    for (Isa isa : syslm::testing::supported_isas())
        for (const Case c :
             {Case{8, 8, 32, 0, 1, 300}, Case{12, 12, 20, 0, 37, 0}, Case{6, 2, 16, 0, 70, 5},
              Case{5, 1, 24, 40, 1, 700}, Case{4, 4, 16, 0, 3, 90}, Case{4, 2, 13, 7, 23, 0}}) {
            check_case(c, isa, 1, rng, DType::F32, 0.0f, 1.5f);
            check_case(c, isa, 3, rng, DType::F16, 0.0f, 0.7f);
            check_case(c, isa, 2, rng, DType::F32, 8.0f, 2.0f);
        }
}

// The slopes of BLOOM's and MPT's reference code (powers of two and the interleaved rest).
TEST(Attention, AlibiSlopesAreTheReferenceOnes) {
    const std::vector<float> m8 = alibi_slopes(8, 8.0f);
    for (int h = 0; h < 8; ++h) EXPECT_FLOAT_EQ(m8[h], std::pow(2.0f, -float(h + 1)));
    // 12 heads: 2^-1 .. 2^-8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
    const std::vector<float> m12 = alibi_slopes(12, 8.0f);
    for (int h = 0; h < 8; ++h) EXPECT_FLOAT_EQ(m12[h], std::pow(2.0f, -float(h + 1)));
    for (int h = 8; h < 12; ++h) EXPECT_FLOAT_EQ(m12[h], std::pow(2.0f, -0.5f - float(h - 8)));
}

TEST(Attention, LargeScoresStayFinite) {
    // Scores of several hundred: the running max must absorb them (no overflow in e^(s - m)).
    std::mt19937 rng(5);
    for (Isa isa : syslm::testing::supported_isas()) {
        ThreadPool pool(2);
        AttentionShape s{4, 2, 16, 32, 0, 1.0f};
        const int64_t T = 40;
        std::vector<float> q(T * 64), k(T * 32), v(T * 32), out(q.size());
        std::uniform_real_distribution<float> u(-6.0f, 6.0f);
        for (auto* vec : {&q, &k, &v})
            for (auto& x : *vec) x = u(rng);
        attention(s, q.data(), k.data(), v.data(), T, 0, out.data(), pool, isa);
        const auto ref = dense_reference(s, q, k, v, T, 0);
        for (size_t i = 0; i < out.size(); ++i)
            ASSERT_NEAR(out[i], ref[i], 5e-5f * (1 + std::fabs(ref[i])))
                << isa_name(isa) << " at " << i;
    }
}

// The first prefill that may take the AMX tiles measures both kernels on this thread, through the
// same thread_local buffers (attention.cpp). A 64-token prefill of 12 heads (smaller buffers than
// the measurement's) once wrote through freed memory. ctest runs each test in its own process,
// so here the decision is made inside this call (unless SYSLM_ATTENTION fixes it); the result
// must be right and the heap intact (ASan builds report it; others crash later, as `syslm bench
// -p 64` did). Whichever kernel is chosen is within the bf16 bound checked below, here
// 2^-5 max|v|.
TEST(Attention, FirstPrefillMeasuresTheChoiceSafely) {
    const AttentionShape s{12, 12, 64, 12 * 64, 0, 0.125f, DType::F16, DType::F16, true};
    const int64_t T = 64;
    std::mt19937 rng(41);
    std::normal_distribution<float> nd(0.0f, 0.5f);
    std::vector<float> q(T * 12 * 64), k(T * s.kv_stride), v(T * s.kv_stride), out(q.size());
    for (auto* vec : {&q, &k, &v})
        for (auto& x : *vec) x = nd(rng);
    std::vector<uint16_t> kh = to_f16_in_place(k), vh = to_f16_in_place(v);
    ThreadPool pool(2);
    for (int rep = 0; rep < 3; ++rep) {
        attention(s, q.data(), kh.data(), vh.data(), T, 0, out.data(), pool);
        const auto ref = dense_reference(s, q, k, v, T, 0);
        double vmax = 0;
        for (float x : v) vmax = std::max(vmax, double(std::fabs(x)));
        for (size_t i = 0; i < out.size(); ++i)
            ASSERT_NEAR(out[i], ref[i], std::ldexp(vmax, -5)) << "rep " << rep << " at " << i;
    }
}

// Prefill on the AMX tiles (bf16_products): Q (scaled), K, P and V rounded to bf16, scores and
// softmax in f32. Bound, from the roundings (u = 2^-9, bf16's unit roundoff): each score moves by
// at most d = 2u * scale * sum_d |q_d k_d| (+ f32 summation), so each weight p_j / l by a factor
// within e^(+-2d); P's and V's roundings add 2u of max |v|. |out - ref| <= max|v| (e^(2d) - 1 +
// 3u) with d the largest over the query's visible keys: checked per query row. F32 and F16
// caches, GQA, windows through blocks, prompts continuing a cache, head sizes 32 / 64 / 96,
// several threads; and the f32 kernel's output must differ (else the tiles did not run).
TEST(Attention, AmxPrefillWithinTheBf16Bound) {
    if (!attention_amx_supported(64)) GTEST_SKIP() << "no AMX-BF16 tiles on this CPU";
    std::mt19937 rng(23);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const double u = std::ldexp(1.0, -9);
    for (const Case c :
         {Case{6, 2, 64, 0, 131, 0}, Case{4, 4, 32, 0, 70, 45}, Case{8, 2, 96, 50, 97, 20},
          Case{12, 12, 64, 0, 64, 0}, Case{3, 1, 64, 33, 150, 300}, Case{12, 12, 64, 0, 80, 0},
          Case{12, 12, 64, 0, 65, 0}})
        for (DType kv_type : {DType::F32, DType::F16}) {
            AttentionShape s{c.n_head,   c.n_head_kv,
                             c.head_dim, int64_t(c.n_head_kv) * c.head_dim,
                             c.window,   1.0f / std::sqrt(float(c.head_dim)),
                             kv_type,    kv_type,
                             true};
            const int64_t total = c.pos0 + c.n_tokens;
            std::vector<float> q(c.n_tokens * c.n_head * c.head_dim), k(total * s.kv_stride),
                v(total * s.kv_stride), out(q.size()), f32(q.size());
            for (auto* vec : {&q, &k, &v})
                for (auto& x : *vec) x = nd(rng);
            // The values both caches hold.
            std::vector<uint16_t> kh = to_f16_in_place(k), vh = to_f16_in_place(v);
            const void* kc = kv_type == DType::F16 ? static_cast<const void*>(kh.data()) : k.data();
            const void* vc = kv_type == DType::F16 ? static_cast<const void*>(vh.data()) : v.data();
            ThreadPool pool(3);
            {
                AttentionAmxOverride on(true);
                attention(s, q.data(), kc, vc, c.n_tokens, c.pos0, out.data(), pool, Isa::Avx512);
            }
            {
                AttentionAmxOverride off(false);
                attention(s, q.data(), kc, vc, c.n_tokens, c.pos0, f32.data(), pool, Isa::Avx512);
            }
            const auto ref = dense_reference(s, q, k, v, c.n_tokens, c.pos0);
            double vmax = 0, moved = 0;
            for (float x : v) vmax = std::max(vmax, double(std::fabs(x)));
            const int D = c.head_dim, G = c.n_head / c.n_head_kv;
            for (int64_t t = 0; t < c.n_tokens; ++t)
                for (int h = 0; h < c.n_head; ++h) {
                    const int64_t pos = c.pos0 + t;
                    const float* qr = q.data() + (t * c.n_head + h) * D;
                    double dmax = 0;
                    for (int64_t p = 0; p <= pos; ++p) {
                        if (c.window > 0 && pos - p >= c.window) continue;
                        double mag = 0;
                        for (int d = 0; d < D; ++d)
                            mag += std::fabs(double(qr[d]) * k[p * s.kv_stride + (h / G) * D + d]);
                        dmax = std::max(dmax, (2 * u + 1e-6) * s.scale * mag);
                    }
                    const double bound = vmax * (std::exp(2 * dmax) - 1 + 3 * u) + 1e-6;
                    for (int d = 0; d < D; ++d) {
                        const size_t i = static_cast<size_t>((t * c.n_head + h) * D + d);
                        ASSERT_NEAR(out[i], ref[i], bound)
                            << "heads " << c.n_head << "/" << c.n_head_kv << " dim " << D
                            << " window " << c.window << " tokens " << c.n_tokens << " pos0 "
                            << c.pos0 << " kv " << dtype_name(kv_type) << " t " << t << " h " << h
                            << " d " << d;
                        moved = std::max(moved, double(std::fabs(out[i] - f32[i])));
                    }
                }
            EXPECT_GT(moved, 0.0)
                << "equal to the f32 kernel's output: the tiles did not run; heads " << c.n_head
                << "/" << c.n_head_kv << " dim " << c.head_dim << " tokens " << c.n_tokens << " kv "
                << dtype_name(kv_type);
        }
}

}  // namespace
}  // namespace syslm::kernels
