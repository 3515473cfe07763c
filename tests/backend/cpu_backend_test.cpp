// The CPU backend's own operations (the loops the layers used to write inline) against plain
// loops on random data of awkward sizes, with 1 and 3 threads: row movement and elementwise
// operations exactly, sums in double within their rounding. The kernels behind the other
// operations have their own tests (tests/kernels); the model tests check that the forward and
// the training step through the backend give the same bits as before.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu_backend.hpp"
#include "kernels/cpu/activations.hpp"
#include "kernels/cpu/moe_routing.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::backend {
namespace {

struct Rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    float uniform() { return static_cast<float>(next() >> 40) / 16777216.0f * 2.0f - 1.0f; }
    std::vector<float> floats(size_t n) {
        std::vector<float> v(n);
        for (float& x : v) x = uniform();
        return v;
    }
};

class CpuBackendOps : public ::testing::TestWithParam<int> {};

TEST_P(CpuBackendOps, RowMovementMatchesPlainLoops) {
    CpuBackend be(GetParam());
    Rng rng{11};
    const int64_t rows = 37, cols = 53;
    const std::vector<float> src = rng.floats(static_cast<size_t>(rows * 61));

    // copy_rows between strides
    std::vector<float> dst(static_cast<size_t>(rows * 59), -7.0f), want = dst;
    be.copy_rows(src.data() + 3, 61, dst.data() + 2, 59, rows, cols);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) want[r * 59 + 2 + c] = src[r * 61 + 3 + c];
    EXPECT_EQ(dst, want);

    // gather_rows, few and many (the pool takes the large ones)
    for (int64_t n : {5, 2000}) {
        std::vector<int64_t> ids(static_cast<size_t>(n));
        for (int64_t& i : ids) i = static_cast<int64_t>(rng.next() % rows);
        std::vector<float> g(static_cast<size_t>(n * 61)), gw(g.size());
        be.gather_rows(src.data(), ids, 61, g.data());
        for (int64_t i = 0; i < n; ++i)
            for (int64_t c = 0; c < 61; ++c) gw[i * 61 + c] = src[ids[i] * 61 + c];
        EXPECT_EQ(g, gw) << n << " rows";
    }

    // scatter_add_rows with repeated destinations, in order
    const std::vector<int64_t> to = {4, 0, 4, 36, 4};
    const std::vector<float> scale = {0.5f, -1.25f, 2.0f, 1.0f, 0.75f};
    std::vector<float> acc = rng.floats(static_cast<size_t>(rows * cols)), accw = acc;
    be.scatter_add_rows(src.data(), to, scale, cols, acc.data());
    for (size_t j = 0; j < to.size(); ++j)
        for (int64_t c = 0; c < cols; ++c)
            accw[to[j] * cols + c] += scale[j] * src[static_cast<int64_t>(j) * cols + c];
    EXPECT_EQ(acc, accw);

    // add
    std::vector<float> y = rng.floats(1001), yw = y;
    const std::vector<float> x = rng.floats(1001);
    be.add(y.data(), x.data(), 1001);
    for (size_t i = 0; i < y.size(); ++i) yw[i] += x[i];
    EXPECT_EQ(y, yw);
}

TEST_P(CpuBackendOps, EmbeddingsGatedAddAndRanges) {
    CpuBackend be(GetParam());
    Rng rng{23};
    const int64_t V = 29, E = 96;  // a multiple of the Q8_0 block (32)
    const std::vector<float> table = rng.floats(static_cast<size_t>(V * E));
    const std::vector<int64_t> ids = {3, 28, 0, 3, 17};
    for (DType type : {DType::F32, DType::F16, DType::Q8_0}) {
        const auto& tt = kernels::type_traits(type);
        const size_t rb = row_bytes(type, E);
        std::vector<uint8_t> stored(rb * V);
        for (int64_t v = 0; v < V; ++v)
            tt.from_float(table.data() + v * E, stored.data() + v * rb, E);
        std::vector<float> out(ids.size() * E), want(out.size()), row(E);
        be.embed_rows(type, stored.data(), E, ids, out.data(), false);
        for (size_t i = 0; i < ids.size(); ++i)
            tt.to_float(stored.data() + ids[i] * rb, want.data() + i * E, E);
        EXPECT_EQ(out, want) << dtype_name(type);
        be.embed_rows(type, stored.data(), E, ids, out.data(), true);  // accumulate: twice
        for (size_t i = 0; i < ids.size(); ++i) {
            tt.to_float(stored.data() + ids[i] * rb, row.data(), E);
            for (int64_t c = 0; c < E; ++c) want[i * E + c] += row[c];
        }
        EXPECT_EQ(out, want) << dtype_name(type) << " accumulated";
    }

    // this rank's rows [10, 20) of the table; the others zero
    const std::vector<int32_t> tok = {9, 10, 19, 20, 15};
    std::vector<float> local(tok.size() * E, 3.0f);
    be.embed_rows_range(table.data() + 10 * E, E, tok.data(), 5, 10, 10, local.data());
    for (size_t i = 0; i < tok.size(); ++i)
        for (int64_t c = 0; c < E; ++c)
            EXPECT_EQ(local[i * E + c], tok[i] >= 10 && tok[i] < 20 ? table[tok[i] * E + c] : 0.0f);

    // embedding gradients: whole vocabulary and one rank's range agree on the rows both hold
    const std::vector<float> dx = rng.floats(tok.size() * E);
    std::vector<float> whole(static_cast<size_t>(V * E), 0.0f),
        part(static_cast<size_t>(10 * E), 0.0f);
    be.embedding_backward(tok.data(), 5, dx.data(), whole.data(), V, E);
    be.embedding_backward_range(tok.data(), 5, dx.data(), part.data(), 10, 10, E);
    for (int64_t r = 0; r < 10; ++r)
        for (int64_t c = 0; c < E; ++c) EXPECT_EQ(part[r * E + c], whole[(10 + r) * E + c]);

    // gated_add: dst += sigmoid(h . gate) * src
    const int64_t rows = 7;
    const std::vector<float> h = rng.floats(rows * E), gate = rng.floats(E),
                             s = rng.floats(rows * E);
    std::vector<float> d = rng.floats(rows * E), dw = d;
    be.gated_add(h.data(), gate.data(), s.data(), rows, E, d.data());
    for (int64_t r = 0; r < rows; ++r) {
        double g = 0;
        for (int64_t c = 0; c < E; ++c) g += gate[c] * h[r * E + c];
        const float sg = kernels::sigmoid(static_cast<float>(g));
        for (int64_t c = 0; c < E; ++c) dw[r * E + c] += sg * s[r * E + c];
    }
    EXPECT_EQ(d, dw);
}

TEST_P(CpuBackendOps, MoeRoutingAndCombine) {
    CpuBackend be(GetParam());
    Rng rng{5};
    const int64_t R = 13, X = 6, K = 2, E = 20;
    std::vector<float> probs = rng.floats(R * X), serial = probs;
    std::vector<int32_t> ids(R * K), ids_w(R * K);
    std::vector<float> w(R * K), w_w(R * K);
    const kernels::MoeRouting top_k{K, K, 0.0f, true};
    be.moe_route_rows(probs.data(), R, X, top_k, ids.data(), w.data(), nullptr);
    std::vector<int64_t> order(X);
    for (int64_t r = 0; r < R; ++r)
        kernels::moe_route_row(serial.data() + r * X, X, top_k, order.data(), ids_w.data() + r * K,
                               w_w.data() + r * K);
    EXPECT_EQ(ids, ids_w);
    EXPECT_EQ(w, w_w);
    EXPECT_EQ(probs, serial);  // the softmax, in place

    // Slots grouped by expert as train/moe.cpp lays them out; combine = sum_k w * eo[slot].
    std::vector<int64_t> begin(X + 1, 0);
    for (int32_t e : ids) ++begin[e + 1];
    for (int64_t e = 0; e < X; ++e) begin[e + 1] += begin[e];
    std::vector<int64_t> cursor(begin.begin(), begin.end() - 1);
    std::vector<int32_t> route_slot(R * K), slot_row(R * K);
    std::vector<float> slot_w(R * K);
    for (int64_t i = 0; i < R * K; ++i) {
        const int64_t j = cursor[ids[i]]++;
        slot_row[j] = static_cast<int32_t>(i / K);
        slot_w[j] = w[i];
        route_slot[i] = static_cast<int32_t>(j);
    }
    const Backend::MoeSlots m{R,           K, X, route_slot.data(), slot_row.data(), slot_w.data(),
                              begin.data()};
    const std::vector<float> eo = rng.floats(R * K * E);
    std::vector<float> out(R * E, 9.0f), want(R * E, 0.0f);
    be.moe_combine(m, eo.data(), E, out.data());
    for (int64_t r = 0; r < R; ++r)
        for (int64_t k = 0; k < K; ++k) {
            const int64_t j = route_slot[r * K + k];
            for (int64_t c = 0; c < E; ++c) want[r * E + c] += slot_w[j] * eo[j * E + c];
        }
    EXPECT_EQ(out, want);
}

TEST_P(CpuBackendOps, OptimizerRulesAndGradientSums) {
    CpuBackend be(GetParam());
    Rng rng{41};
    const int64_t n = 1037;
    const std::vector<float> g = rng.floats(n);
    for (auto rule : {Backend::UpdateRule::Lion, Backend::UpdateRule::Sgd}) {
        std::vector<float> w = rng.floats(n), m = rng.floats(n);
        std::vector<float> ww = w, mw = m;
        Backend::UpdateStep s{};
        s.rule = rule;
        s.lr = 0.01f;
        s.weight_decay = 0.1f;
        s.b1 = 0.9f;
        s.b2 = 0.99f;
        s.grad_scale = 0.5f;
        s.momentum = 0.9f;
        s.nesterov = true;
        be.optimizer_update(s, w.data(), g.data(), m.data(), nullptr, n);
        for (int64_t i = 0; i < n; ++i) {
            const float gi = g[i] * s.grad_scale;
            if (rule == Backend::UpdateRule::Lion) {
                ww[i] *= 1.0f - s.lr * s.weight_decay;
                const float c = mw[i] * s.b1 + gi * (1.0f - s.b1);
                ww[i] -= s.lr * static_cast<float>((c > 0.0f) - (c < 0.0f));
                mw[i] = mw[i] * s.b2 + gi * (1.0f - s.b2);
            } else {
                float d = gi + s.weight_decay * ww[i];
                mw[i] = mw[i] * s.momentum + d;
                d = d + s.momentum * mw[i];
                ww[i] += -s.lr * d;
            }
        }
        EXPECT_EQ(w, ww);
        EXPECT_EQ(m, mw);
    }

    // scale over ranges; sum of squares per class
    std::vector<float> x = g, xw = g;
    const std::vector<Backend::Range> ranges = {{3, 400}, {500, 1037}};
    be.scale(x.data(), ranges, 0.25f);
    for (const auto& [b, e] : ranges)
        for (size_t i = b; i < e; ++i) xw[i] *= 0.25f;
    EXPECT_EQ(x, xw);
    const std::vector<Backend::SquaresPiece> pieces = {{0, 300, 0}, {300, 301, 1}, {301, 1037, 0}};
    const std::array<double, 2> sums = be.sum_squares(g.data(), pieces);
    double want[2] = {0, 0};
    for (const auto& p : pieces)
        for (size_t i = p.b; i < p.e; ++i) want[p.cls] += static_cast<double>(g[i]) * g[i];
    // Products of floats are exact in double; only the order of ~1000 additions differs.
    for (int c = 0; c < 2; ++c) EXPECT_NEAR(sums[c], want[c], 1e-12 * want[c]) << c;

    // kept zeros
    std::vector<float> z = g;
    be.fill_zero(z.data(), ranges);
    for (const auto& [b, e] : ranges)
        for (size_t i = b; i < e; ++i) EXPECT_EQ(z[i], 0.0f);
    EXPECT_EQ(z[400], g[400]);
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuBackendOps, ::testing::Values(1, 3));

}  // namespace
}  // namespace syslm::backend
