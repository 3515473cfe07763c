// Gradient compression: each compressor's message size and decoding against its definition, the
// error-feedback property (what is lost is only delayed: the running mean of the decoded
// messages of a fixed gradient converges to it), and the compressed reduction under mpirun:
// the owners' compressed updates leave every rank with the same weights, for 4x (int8) and
// >= 20x (sign) fewer bytes than the plain all-reduce.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "parallel/communicator.hpp"
#include "world.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/grad_compress.hpp"

namespace syslm::parallel {
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
    for (float v : x) amax = std::max(amax, std::fabs(v));

    const Compressor i8(Compression::Int8);
    EXPECT_EQ(i8.bytes(1003), 1007u);
    const std::vector<float> d8 = round_trip(i8, x);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_LE(std::fabs(d8[i] - x[i]), amax / 127 / 2 * 1.0001f);

    // Sign: groups of kSignGroup values (the last one shorter), each with its mean |x| as scale.
    const Compressor sign(Compression::Sign);
    const size_t groups = (x.size() + kSignGroup - 1) / kSignGroup;
    EXPECT_EQ(sign.bytes(1003), 4 * groups + 126u);
    const std::vector<float> ds = round_trip(sign, x);
    for (size_t g = 0; g < groups; ++g) {
        const size_t b = g * kSignGroup, e = std::min(x.size(), b + kSignGroup);
        double mean_abs = 0;
        for (size_t i = b; i < e; ++i) mean_abs += std::fabs(x[i]);
        const float m = static_cast<float>(mean_abs / static_cast<double>(e - b));
        for (size_t i = b; i < e; ++i) ASSERT_FLOAT_EQ(ds[i], x[i] < 0 ? -m : m) << i;
    }

    // Top-k: the k largest magnitudes survive (in bf16), nothing else; positions as a bitmap
    // (5% of 1003: 126 bytes < 51 indices) or as indices (1%: 11 indices < 126 bytes).
    for (const double ratio : {0.05, 0.01}) {
        const Compressor top(Compression::TopK, ratio);
        const size_t k = static_cast<size_t>(std::ceil(ratio * 1003));
        EXPECT_EQ(top.bytes(1003), (ratio == 0.05 ? 126u : 4 * k) + 2 * k);
        const std::vector<float> dt = round_trip(top, x);
        std::vector<float> mags;
        for (float v : x) mags.push_back(std::fabs(v));
        std::sort(mags.rbegin(), mags.rend());
        size_t kept = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            if (dt[i] != 0.0f) {
                ++kept;
                ASSERT_EQ(dt[i], bf16_to_f32(f32_to_bf16(x[i]))) << i;
                ASSERT_GE(std::fabs(x[i]), mags[k - 1]);
            } else {
                ASSERT_LE(std::fabs(x[i]), mags[k - 1]);
            }
        }
        EXPECT_EQ(kept, k) << ratio;
    }
    // A message whose bitmap does not hold exactly k positions is refused.
    const Compressor top(Compression::TopK, 0.05);
    std::vector<uint8_t> msg(top.bytes(1003));
    top.compress(x.data(), x.size(), msg.data());
    msg[0] ^= 0xff;
    std::vector<float> out(x.size(), 0.0f);
    EXPECT_THROW(top.decompress_add(msg.data(), x.size(), out.data()), Error);
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

// The compressed reduction leaves each rank with its blocks' sums (close to the exact ones);
// the owners' compressed updates then leave every rank with the same weights, close to the
// owners' exact ones, and a second round carries what the first lost. Bytes of both phases
// against the plain all-reduce: 4x (int8), >= 20x (sign), 66x (top-k at 1%).
TEST(GradCompress, CompressedReductionAndUpdatesAgreeOnEveryRankWithFewerBytes) {
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
    std::vector<GradientReducer::Bucket> mine;
    for (const auto& b : buckets) mine.push_back(GradientReducer::shard_of(b, c.rank(), p));
    auto relative_error = [&](const std::vector<float>& got, bool own_blocks_only) {
        double err = 0, norm = 0;
        for (const auto& b : own_blocks_only ? mine : buckets)
            for (size_t i = b.begin; i < b.end; ++i) {
                err += (got[i] - exact[i]) * (got[i] - exact[i]);
                norm += exact[i] * exact[i];
            }
        return std::sqrt(err / norm);
    };
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
        const double reduced = relative_error(g, true);
        // The owners' "weights" are their blocks' sums; the shared ones start at zero.
        std::vector<float> master, values(n, 0.0f);
        for (const auto& b : mine) master.insert(master.end(), g.begin() + b.begin, g.begin() + b.end);
        red.all_gather_updates(values.data(), master.data());
        const double ratio = static_cast<double>(plain_bytes) / c.bytes_sent();
        std::vector<float> ref = values;  // every rank holds the same weights, bit for bit
        c.broadcast(ref.data(), ref.size() * sizeof(float), 0);
        ASSERT_EQ(ref, values) << compression_name(kind);
        const double shared = relative_error(values, false);
        red.all_gather_updates(values.data(), master.data());  // what was lost, sent again
        const double again = relative_error(values, false);
        if (kind == Compression::Int8) {
            EXPECT_GE(ratio, 3.99);
            EXPECT_LT(reduced, 0.02);
            EXPECT_LT(shared, 0.03);
        } else if (kind == Compression::Sign) {
            EXPECT_GE(ratio, 20.0);
        } else {
            EXPECT_GE(ratio, 60.0);
        }
        EXPECT_LT(again, shared) << compression_name(kind) << ": error feedback in weight space";
    }
}

// With divisors d (AdamW's sqrt(v)), a rank sends C((g + e) / d) and keeps (g + e) - d x decoded:
// nothing is lost, so each block's reduced sum plus every other rank's residual there is the
// exact sum. The error of each value follows its divisor: values with 10x the divisor carry
// about 10x the error.
TEST(GradCompress, DivisorsShapeTheErrorAndLoseNothing) {
    Communicator& c = world_comm();
    const int p = c.size();
    if (p == 1) GTEST_SKIP() << "a reduction needs more than one rank";
    const size_t n = 50021;
    const std::vector<GradientReducer::Bucket> buckets = {{0, 20011}, {20011, n}};
    std::vector<float> d(n);
    for (size_t i = 0; i < n; ++i) d[i] = (i / 64) % 2 ? 10.0f : 1.0f;  // alternate sign groups
    std::vector<double> exact(n, 0.0);
    for (int r = 0; r < p; ++r) {
        const std::vector<float> g = gradient(n, 300 + r);
        for (size_t i = 0; i < n; ++i) exact[i] += static_cast<double>(g[i]) * d[i];
    }
    std::vector<float> g = gradient(n, 300 + c.rank());
    for (size_t i = 0; i < n; ++i) g[i] *= d[i];  // gradients on the divisors' scale
    GradientReducer red(c, buckets, GradientReducer::Mode::Compressed, Compressor(Compression::Sign));
    red.divisors() = d;
    red.start(g.data());
    for (size_t b = buckets.size(); b-- > 0;) red.ready(b);
    red.finish();
    std::vector<float> residuals = red.residual();  // summed over the ranks
    c.all_reduce_sum(residuals.data(), n);
    double err[2] = {0, 0}, count[2] = {0, 0};
    for (const auto& b : buckets) {
        const auto mine = GradientReducer::shard_of(b, c.rank(), p);
        for (size_t i = mine.begin; i < mine.end; ++i) {
            // this rank's own residual is zero in its block: it sends itself nothing
            ASSERT_NEAR(g[i] + residuals[i], exact[i], 1e-5 * (std::fabs(exact[i]) + 1e-3)) << i;
            const int big = d[i] > 1.0f;
            err[big] += std::fabs(g[i] - exact[i]);
            ++count[big];
        }
    }
    const double ratio = (err[1] / count[1]) / (err[0] / count[0]);
    EXPECT_GT(ratio, 7.0) << "mean error with divisor 10 over divisor 1";
    EXPECT_LT(ratio, 14.0);
}

}  // namespace
}  // namespace syslm::parallel
