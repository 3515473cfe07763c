// Gradient compression: each compressor's message size and decoding against its definition, the
// error-feedback property (what is lost is only delayed: the running mean of the decoded
// messages of a fixed gradient converges to it), and the compressed reduction under mpirun:
// every rank ends with the same sums, close to the exact ones, for 4x (int8) and >= 20x (sign)
// fewer bytes than the plain all-reduce; training with it follows the uncompressed loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "dist/communicator.hpp"
#include "world.hpp"
#include "dist/data_parallel.hpp"
#include "dist/grad_compress.hpp"

namespace syslm::dist {
namespace {

std::vector<float> gradient(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1e-3f);
    std::vector<float> g(n);
    for (float& v : g) v = nd(rng);
    return g;
}

std::vector<float> round_trip(const Compressor& c, const std::vector<float>& x) {
    std::vector<uint8_t> msg(c.bytes(x.size()));
    c.compress(x.data(), x.size(), msg.data());
    std::vector<float> out(x.size(), 0.0f);
    c.decompress_add(msg.data(), x.size(), out.data());
    return out;
}

TEST(GradCompress, MessagesDecodeAsDefined) {
    const std::vector<float> x = gradient(1003, 1);
    float amax = 0;
    double mean_abs = 0;
    for (float v : x) {
        amax = std::max(amax, std::fabs(v));
        mean_abs += std::fabs(v);
    }
    mean_abs /= x.size();

    const Compressor i8(Compression::Int8);
    EXPECT_EQ(i8.bytes(1003), 1007u);
    const std::vector<float> d8 = round_trip(i8, x);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_LE(std::fabs(d8[i] - x[i]), amax / 127 / 2 * 1.0001f);

    const Compressor sign(Compression::Sign);
    EXPECT_EQ(sign.bytes(1003), 4u + 126u);  // one group
    const std::vector<float> ds = round_trip(sign, x);
    for (size_t i = 0; i < x.size(); ++i)
        ASSERT_FLOAT_EQ(ds[i], x[i] < 0 ? -static_cast<float>(mean_abs) : static_cast<float>(mean_abs));
    // Groups of kSignGroup values carry their own scales: the second group is ten times larger.
    std::vector<float> y = gradient(kSignGroup + 77, 5);
    for (size_t i = kSignGroup; i < y.size(); ++i) y[i] *= 10;
    EXPECT_EQ(sign.bytes(y.size()), 8u + (y.size() + 7) / 8);
    const std::vector<float> dy = round_trip(sign, y);
    double m0 = 0, m1 = 0;
    for (size_t i = 0; i < kSignGroup; ++i) m0 += std::fabs(y[i]);
    for (size_t i = kSignGroup; i < y.size(); ++i) m1 += std::fabs(y[i]);
    EXPECT_FLOAT_EQ(std::fabs(dy[0]), static_cast<float>(m0 / kSignGroup));
    EXPECT_FLOAT_EQ(std::fabs(dy.back()), static_cast<float>(m1 / 77));

    const Compressor top(Compression::TopK, 0.05);  // k = ceil(50.15) = 51
    EXPECT_EQ(top.bytes(1003), 51u * 8u);
    const std::vector<float> dt = round_trip(top, x);
    std::vector<float> mags;
    for (float v : x) mags.push_back(std::fabs(v));
    std::sort(mags.rbegin(), mags.rend());
    int kept = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        if (dt[i] != 0.0f) {
            ++kept;
            ASSERT_EQ(dt[i], x[i]);
            ASSERT_GE(std::fabs(x[i]), mags[50]);
        } else {
            ASSERT_LE(std::fabs(x[i]), mags[50]);
        }
    }
    EXPECT_EQ(kept, 51);
    EXPECT_THROW(compression_kind("fp4"), Error);
}

// With error feedback, sending the same gradient g for many steps delivers g on average.
TEST(GradCompress, ErrorFeedbackOnlyDelaysWhatIsLost) {
    const std::vector<float> g = gradient(257, 2);
    for (Compression kind : {Compression::Int8, Compression::TopK, Compression::Sign}) {
        const Compressor c(kind, 0.05);
        std::vector<float> error(g.size(), 0.0f), total(g.size(), 0.0f), x(g.size());
        std::vector<uint8_t> msg(c.bytes(g.size()));
        const int steps = 4000;  // sign converges slowest: its residual settles near 14 |g|
        for (int s = 0; s < steps; ++s) {
            for (size_t i = 0; i < g.size(); ++i) x[i] = g[i] + error[i];
            c.compress(x.data(), x.size(), msg.data());
            std::vector<float> d(g.size(), 0.0f);
            c.decompress_add(msg.data(), g.size(), d.data());
            for (size_t i = 0; i < g.size(); ++i) {
                error[i] = x[i] - d[i];
                total[i] += d[i];
            }
        }
        // total = steps x g - error: the residual stays bounded, so the mean converges.
        double worst = 0, scale = 0;
        for (size_t i = 0; i < g.size(); ++i) {
            worst = std::max(worst, static_cast<double>(std::fabs(total[i] / steps - g[i])));
            scale = std::max(scale, static_cast<double>(std::fabs(g[i])));
        }
        EXPECT_LT(worst, 0.05 * scale) << compression_name(kind);
    }
}

TEST(GradCompress, CompressedReductionAgreesOnEveryRankWithFewerBytes) {
    Communicator& c = world_comm();
    const int p = c.size();
    if (p == 1) GTEST_SKIP() << "a reduction needs more than one rank";
    const size_t n = 200003;
    const std::vector<GradientReducer::Bucket> buckets = {{0, 70001}, {70001, 70001}, {70001, n}};
    std::vector<double> exact(n, 0.0);
    for (int r = 0; r < p; ++r) {
        const std::vector<float> g = gradient(n, 100 + r);
        for (size_t i = 0; i < n; ++i) exact[i] += g[i];
    }
    uint64_t plain_bytes;
    {
        c.reset_stats();
        std::vector<float> g = gradient(n, 100 + c.rank());
        GradientReducer red(c, buckets);
        red.start(g.data());
        for (size_t b = 0; b < buckets.size(); ++b) red.ready(b);
        red.finish();
        plain_bytes = c.bytes_sent();
    }
    for (Compression kind : {Compression::Int8, Compression::TopK, Compression::Sign}) {
        c.reset_stats();
        std::vector<float> g = gradient(n, 100 + c.rank());
        GradientReducer red(c, buckets, GradientReducer::Mode::Compressed, Compressor(kind, 0.01));
        red.start(g.data());
        for (size_t b = buckets.size(); b-- > 0;) red.ready(b);
        red.finish();
        const double ratio = static_cast<double>(plain_bytes) / c.bytes_sent();
        // Every rank holds the same sums: rank 0's, broadcast, compared bit for bit.
        std::vector<float> ref = g;
        c.broadcast(ref.data(), ref.size() * sizeof(float), 0);
        ASSERT_EQ(ref, g) << compression_name(kind);
        double err = 0, norm = 0;
        for (size_t i = 0; i < n; ++i) {
            err += (g[i] - exact[i]) * (g[i] - exact[i]);
            norm += exact[i] * exact[i];
        }
        const double rel = std::sqrt(err / norm);
        if (kind == Compression::Int8) {
            EXPECT_GE(ratio, 3.99);
            EXPECT_LT(rel, 0.02);  // one step's error; feedback carries it to the next
        } else if (kind == Compression::Sign) {
            EXPECT_GE(ratio, 20.0);
        } else {
            EXPECT_GE(ratio, 40.0);  // 1% of the values as (index, value) pairs: 50x
        }
    }
}

}  // namespace
}  // namespace syslm::dist
