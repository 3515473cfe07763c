// Linear attention (kernels/cpu/linear_attention.hpp) against a dense causal reference in double
// (sum_p phi(q).phi(k_p) v_p / sum_p phi(q).phi(k_p)): prefill by prefix sums, decode by the
// direct sum, over F32 and F16 caches, contiguous and paged; generation over a recurrent state
// with rollbacks; the backward against central differences. GQA (4 heads on 2 KV heads), head sizes
// shorter than a vector (7) and with a tail after whole vectors (37), for every ISA this CPU
// supports.
#include "kernels/cpu/linear_attention.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "../common/isas.hpp"
#include "../common/random_values.hpp"
#include "core/half.hpp"

namespace syslm::kernels {
namespace {

constexpr int kHeads = 4, kKvHeads = 2;
int kDim = 7;  // the case's head size (set by each test's loop)
int64_t QD = kHeads * kDim, KD = kKvHeads * kDim;

void set_dim(int d) {
    kDim = d;
    QD = kHeads * kDim;
    KD = kKvHeads * kDim;
}

AttentionShape shape() {
    AttentionShape s{};
    s.n_head = kHeads;
    s.n_head_kv = kKvHeads;
    s.head_dim = kDim;
    s.kv_stride = KD;
    s.scale = 0.3f;  // unused by linear attention
    s.linear = true;
    return s;
}

double phi(double x) {
    return x > 0 ? x + 1 : std::exp(x);
}

// Queries at positions pos0 + t over keys/values 0 .. pos0 + t, in double.
std::vector<double> reference(const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, int64_t n, int64_t pos0) {
    std::vector<double> out(size_t(n) * QD);
    for (int64_t t = 0; t < n; ++t)
        for (int h = 0; h < kHeads; ++h) {
            const int hk = h / (kHeads / kKvHeads);
            double den = 0;
            std::vector<double> num(kDim);
            for (int64_t p = 0; p <= pos0 + t; ++p) {
                double w = 0;
                for (int i = 0; i < kDim; ++i)
                    w += phi(q[t * QD + h * kDim + i]) * phi(k[p * KD + hk * kDim + i]);
                den += w;
                for (int j = 0; j < kDim; ++j) num[j] += w * v[p * KD + hk * kDim + j];
            }
            for (int j = 0; j < kDim; ++j) out[t * QD + h * kDim + j] = num[j] / den;
        }
    return out;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want, double tol,
                 const char* what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " " << i;
}

void check_prefill_and_decode(Isa isa);

TEST(LinearAttention, PrefillAndDecodeMatchTheDenseReference) {
    for (const int dim : {7, 37})
        for (const Isa isa : syslm::testing::supported_isas()) {
            SCOPED_TRACE(::testing::Message() << "dim " << dim << " " << isa_name(isa));
            set_dim(dim);
            check_prefill_and_decode(isa);
        }
}

void check_prefill_and_decode(Isa isa) {
    ThreadPool pool(2);
    const AttentionShape s = shape();
    const int64_t n_ctx = kDim + 29;
    const auto k = testing::random_floats(n_ctx * KD, 1), v = testing::random_floats(n_ctx * KD, 2);
    // Prefill from 0 (prefix sums: more tokens than a head's size), then queries from 20 on
    // (direct sums), and a chunk of 9 at position 20 (prefix sums over the cache first, for the
    // head of 7).
    for (auto [n, pos0] : {std::pair<int64_t, int64_t>{kDim + 13, 0}, {3, 20}, {9, 20}}) {
        const auto q = testing::random_floats(n * QD, 3 + static_cast<uint32_t>(n));
        const auto want = reference(q, k, v, n, pos0);
        std::vector<float> out(n * QD), den(n * kHeads);
        linear_attention(s, q.data(), k.data(), v.data(), nullptr, n, pos0, out.data(), pool, isa,
                         den.data());
        expect_near(out, want, 1e-5, "f32");
        for (float x : den) EXPECT_GT(x, 0);
        // The attention entry point branches here for a linear shape.
        std::vector<float> via(n * QD);
        attention(s, q.data(), k.data(), v.data(), n, pos0, via.data(), pool, isa);
        EXPECT_EQ(via, out);
        // F16 cache: the reference on the rounded rows.
        std::vector<uint16_t> kh(k.size()), vh(v.size());
        std::vector<float> kr(k.size()), vr(v.size());
        for (size_t i = 0; i < k.size(); ++i) {
            kh[i] = f32_to_f16(k[i]);
            vh[i] = f32_to_f16(v[i]);
            kr[i] = f16_to_f32(kh[i]);
            vr[i] = f16_to_f32(vh[i]);
        }
        AttentionShape sh = s;
        sh.k_type = sh.v_type = DType::F16;
        linear_attention(sh, q.data(), kh.data(), vh.data(), nullptr, n, pos0, out.data(), pool,
                         isa);
        expect_near(out, reference(q, kr, vr, n, pos0), 1e-5, "f16");
        // Paged (pages of 4 positions, in reverse order in memory): the contiguous result.
        const int ps = 4, n_pages = (n_ctx + ps - 1) / ps;
        std::vector<float> kp(size_t(n_pages) * ps * KD), vp(kp.size());
        std::vector<const void*> kpages(n_pages), vpages(n_pages);
        for (int pg = 0; pg < n_pages; ++pg) {
            const int slot = n_pages - 1 - pg;
            kpages[pg] = kp.data() + size_t(slot) * ps * KD;
            vpages[pg] = vp.data() + size_t(slot) * ps * KD;
            for (int r = 0; r < ps && pg * ps + r < n_ctx; ++r)
                for (int64_t c = 0; c < KD; ++c) {
                    kp[(size_t(slot) * ps + r) * KD + c] = k[(pg * ps + r) * KD + c];
                    vp[(size_t(slot) * ps + r) * KD + c] = v[(pg * ps + r) * KD + c];
                }
        }
        std::vector<float> paged(n * QD), contiguous(n * QD);
        attention_paged(s, q.data(), KvPagesView{kpages.data(), vpages.data(), ps}, n, pos0,
                        paged.data(), pool, isa);
        linear_attention(s, q.data(), k.data(), v.data(), nullptr, n, pos0, contiguous.data(), pool,
                         isa);
        EXPECT_EQ(paged, contiguous);
        // The serving step's entry point (several sequences) too.
        std::vector<float> batched(n * QD);
        const PagedSequence seq{KvPagesView{kpages.data(), vpages.data(), ps}, q.data(),
                                batched.data(), n, pos0};
        attention_paged(s, std::span(&seq, 1), pool, isa);
        EXPECT_EQ(batched, contiguous);
    }
}

// Generation over a recurrent state (LinearState): a prefill, tokens decoded one at a time, a
// rollback before the last call's checkpoint (recomputed from position 0) and one into it (from
// the checkpoint), each time with the rolled-back rows rewritten, as speculative decoding does,
// and a reset (a preempted sequence):
// every output is the dense reference's over the cache as it then is; the paged entry point
// carries a state the same way, bit for bit.
TEST(LinearAttention, ARecurrentStateDecodesAndRollsBackAsTheReference) {
    for (const int dim : {7, 37})
        for (const Isa isa : syslm::testing::supported_isas()) {
            SCOPED_TRACE(::testing::Message() << "dim " << dim << " " << isa_name(isa));
            set_dim(dim);
            ThreadPool pool(2);
            const AttentionShape s = shape();
            const int64_t n_ctx = 40;
            auto k = testing::random_floats(n_ctx * KD, 11),
                 v = testing::random_floats(n_ctx * KD, 12);
            LinearState st, paged_st;
            const KvPagesView view{nullptr, nullptr, static_cast<int>(n_ctx)};
            int call = 0;
            auto run = [&](int64_t pos0, int64_t n) {
                const auto q = testing::random_floats(n * QD, 100 + call++);
                std::vector<float> out(n * QD), paged(n * QD);
                linear_attention(s, q.data(), k.data(), v.data(), nullptr, n, pos0, out.data(),
                                 pool, isa, nullptr, &st);
                expect_near(out, reference(q, k, v, n, pos0), 1e-5, "state");
                const void* kp = k.data();
                const void* vp = v.data();
                PagedSequence seq{KvPagesView{&kp, &vp, view.page_size}, q.data(), paged.data(), n,
                                  pos0};
                seq.linear = &paged_st;
                attention_paged(s, std::span(&seq, 1), pool, isa);
                EXPECT_EQ(paged, out);
                EXPECT_EQ(st.pos, pos0 + n);
            };
            auto rewrite = [&](int64_t from, uint32_t seed) {  // new drafts' rows from `from` on
                const auto nk = testing::random_floats(n_ctx * KD, seed);
                const auto nv = testing::random_floats(n_ctx * KD, seed + 1);
                std::copy(nk.begin() + from * KD, nk.end(), k.begin() + from * KD);
                std::copy(nv.begin() + from * KD, nv.end(), v.begin() + from * KD);
            };
            run(0, 10);
            for (int64_t p = 10; p < 15; ++p) run(p, 1);
            rewrite(12, 21);
            run(12, 2);  // before the checkpoint (14): from position 0
            run(14, 4);  // a verify call of 4: checkpoint at 14
            rewrite(16, 23);
            run(16, 3);  // into it: from the checkpoint
            EXPECT_EQ(st.saved_pos, 16);
            st.reset();  // given back (a preempted sequence): anew over rewritten rows
            paged_st.reset();
            rewrite(0, 25);
            run(0, 3);
        }
}

void check_backward(Isa isa);

TEST(LinearAttention, BackwardMatchesCentralDifferences) {
    for (const int dim : {7, 37})
        for (const Isa isa : syslm::testing::supported_isas()) {
            SCOPED_TRACE(::testing::Message() << "dim " << dim << " " << isa_name(isa));
            set_dim(dim);
            check_backward(isa);
        }
}

void check_backward(Isa isa) {
    ThreadPool pool(2);
    const AttentionShape s = shape();
    const int64_t T = 11;
    const auto q = testing::random_floats(T * QD, 7), k = testing::random_floats(T * KD, 8),
               v = testing::random_floats(T * KD, 9);
    const auto r = testing::random_floats(T * QD, 10);  // dL/dout: L = sum out * r
    std::vector<float> out(T * QD), den(T * kHeads);
    attention(s, q.data(), k.data(), v.data(), T, 0, out.data(), pool, isa, den.data());
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    attention_backward(s, q.data(), k.data(), v.data(), out.data(), den.data(), r.data(), T,
                       dq.data(), dk.data(), dv.data(), pool, isa);
    auto loss = [&](const std::vector<float>& qq, const std::vector<float>& kk,
                    const std::vector<float>& vv) {
        const auto o = reference(qq, kk, vv, T, 0);
        double l = 0;
        for (size_t i = 0; i < o.size(); ++i) l += o[i] * r[i];
        return l;
    };
    auto check = [&](std::vector<float> p, const std::vector<float>& got,
                     const std::function<double(const std::vector<float>&)>& f, const char* what) {
        double scale = 0;
        std::vector<double> want(p.size());
        for (size_t i = 0; i < p.size(); ++i) {
            const float keep = p[i], hi = keep + 1e-3f, lo = keep - 1e-3f;
            p[i] = hi;
            const double up = f(p);
            p[i] = lo;
            const double down = f(p);
            p[i] = keep;
            want[i] = (up - down) / (double(hi) - double(lo));  // the steps floats can take
            scale = std::max(scale, std::fabs(want[i]));
        }
        // Steps of 1e-3: good to ~h^2 of the curvature, ~h where phi' has its kink at 0.
        for (size_t i = 0; i < p.size(); ++i)
            ASSERT_NEAR(got[i], want[i], 2e-3 * scale) << what << " " << i;
    };
    check(
        q, dq, [&](const std::vector<float>& p) { return loss(p, k, v); }, "dq");
    check(
        k, dk, [&](const std::vector<float>& p) { return loss(q, p, v); }, "dk");
    check(
        v, dv, [&](const std::vector<float>& p) { return loss(q, k, p); }, "dv");
}

}  // namespace
}  // namespace syslm::kernels
