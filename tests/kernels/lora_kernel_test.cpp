// LoRA's row kernel (kernels/cpu/lora.hpp) against a double-precision reference: the vector
// loops of every ISA this CPU supports (A rows against 1 to 4 rows x, the rank-r weighted row
// sums into 1 to 4 rows y) and lora_update over segments, with adapters stored as f32 and as
// f16, awkward widths (tails after whole vectors, widths under one vector) and ranks, segments
// of more rows than one group, rows each in one segment (one pass), a row in two segments (the
// column-split pass) and segments writing two outputs of different widths from one input, on
// pools of 1 to 3 threads. Bounds are float's
// summation bound gamma_k = k u / (1 - k u) times the sums of absolute terms, not fitted.
#include "kernels/cpu/lora.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "../common/isas.hpp"
#include "../common/random_values.hpp"
#include "core/half.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/isa.hpp"

namespace syslm::kernels {
namespace {

double gamma(int k) {
    const double u = std::ldexp(1.0, -24);
    return k * u / (1 - k * u);
}

// Values as the kernel stores them (f16 or f32 bytes) and as it reads them back.
struct Stored {
    std::vector<uint8_t> bytes;
    std::vector<float> values;
};

Stored store(const std::vector<float>& v, bool f16) {
    Stored s;
    s.bytes.resize(v.size() * (f16 ? 2 : 4));
    s.values = v;
    for (size_t i = 0; i < v.size(); ++i) {
        if (f16) {
            const uint16_t h = f32_to_f16(v[i]);
            std::memcpy(s.bytes.data() + 2 * i, &h, 2);
            s.values[i] = f16_to_f32(h);
        } else {
            std::memcpy(s.bytes.data() + 4 * i, &v[i], 4);
        }
    }
    return s;
}

TEST(LoraKernels, DownAndWeightedRowSumsMatchDoubleOnEveryIsa) {
    uint32_t seed = 1;
    for (Isa isa : syslm::testing::supported_isas())
        for (bool f16 : {false, true})
            for (int n : {3, 16, 37, 100, 131})
                for (int r : {1, 3, 5, 16})
                    for (int nx = 1; nx <= kLoraRowGroup; ++nx) {
                        SCOPED_TRACE(::testing::Message()
                                     << "isa " << static_cast<int>(isa) << " f16 " << f16 << " n "
                                     << n << " r " << r << " rows " << nx);
                        const LoraKernels& k = attention_kernels(isa).lora;
                        const Stored a =
                            store(syslm::testing::random_floats(size_t(r) * n, ++seed), f16);
                        const std::vector<float> x =
                            syslm::testing::random_floats(size_t(nx) * n, ++seed);
                        const float* xs[kLoraRowGroup];
                        for (int j = 0; j < nx; ++j) xs[j] = x.data() + j * n;
                        std::vector<float> out(size_t(nx) * r, 0.0f);
                        k.down[f16](a.bytes.data(), r, n, xs, nx, 0.7f, out.data());
                        for (int j = 0; j < nx; ++j)
                            for (int i = 0; i < r; ++i) {
                                double ref = 0, abs = 0;
                                for (int c = 0; c < n; ++c) {
                                    ref += double(a.values[i * n + c]) * x[j * n + c];
                                    abs += std::fabs(double(a.values[i * n + c]) * x[j * n + c]);
                                }
                                EXPECT_NEAR(out[j * r + i], 0.7 * ref,
                                            gamma(n + 1) * 0.7 * abs + 1e-30)
                                    << j << " " << i;
                            }
                        // y_j += sum_k m_jk b_k over the first n of rows `stride` apart
                        const int stride = n + 5;
                        const Stored b =
                            store(syslm::testing::random_floats(size_t(r) * stride, ++seed), f16);
                        const std::vector<float> m =
                            syslm::testing::random_floats(size_t(nx) * r, ++seed);
                        std::vector<float> y = syslm::testing::random_floats(size_t(nx) * n,
                                                                             ++seed),
                                           y0 = y;
                        float* ys[kLoraRowGroup];
                        for (int j = 0; j < nx; ++j) ys[j] = y.data() + j * n;
                        k.axpy_rows[f16](ys, nx, m.data(), b.bytes.data(), stride, r, n);
                        for (int j = 0; j < nx; ++j)
                            for (int c = 0; c < n; ++c) {
                                double ref = y0[j * n + c], abs = std::fabs(y0[j * n + c]);
                                for (int i = 0; i < r; ++i) {
                                    ref += double(m[j * r + i]) * b.values[i * stride + c];
                                    abs +=
                                        std::fabs(double(m[j * r + i]) * b.values[i * stride + c]);
                                }
                                EXPECT_NEAR(y[j * n + c], ref, gamma(r + 1) * abs + 1e-30)
                                    << j << " " << c;
                            }
                    }
}

struct Adapter {
    int r;
    Stored a, bt;  // r x n_in, r x n_out of its output
    float scale;
    std::vector<int64_t> rows;
    int output = 0;  // which of the outputs it writes
};

// Segments of `adapters` over `rows` rows of x, into outputs of the widths n_out (one per output).
void check_update(const std::vector<Adapter>& adapters, int64_t rows, int64_t n_in,
                  const std::vector<int64_t>& n_out, bool f16, int threads, uint32_t seed) {
    const std::vector<float> x = syslm::testing::random_floats(size_t(rows) * n_in, seed);
    std::vector<std::vector<float>> y, y0;
    for (size_t o = 0; o < n_out.size(); ++o) {
        y.push_back(syslm::testing::random_floats(size_t(rows * n_out[o]), seed + 1 + uint32_t(o)));
        y0.push_back(y.back());
    }
    std::vector<LoraSegment> segs;
    size_t dots = 0;
    for (const Adapter& ad : adapters) {
        segs.push_back({ad.a.bytes.data(), ad.bt.bytes.data(), f16, ad.r, ad.scale, ad.rows.data(),
                        static_cast<int64_t>(ad.rows.size()), y[size_t(ad.output)].data(),
                        n_out[size_t(ad.output)]});
        dots += ad.rows.size() * size_t(ad.r);
    }
    std::vector<float> mid(dots);
    ThreadPool pool(threads);
    lora_update(x.data(), n_in, segs, mid.data(), pool);
    for (size_t o = 0; o < n_out.size(); ++o) {
        const int64_t w = n_out[o];
        std::vector<double> ref(y0[o].begin(), y0[o].end()), abs(y0[o].size());
        for (size_t i = 0; i < y0[o].size(); ++i) abs[i] = std::fabs(y0[o][i]);
        for (const Adapter& ad : adapters) {
            if (size_t(ad.output) != o) continue;
            for (int64_t row : ad.rows)
                for (int k = 0; k < ad.r; ++k) {
                    double d = 0, dabs = 0;
                    for (int64_t i = 0; i < n_in; ++i) {
                        d += double(ad.a.values[k * n_in + i]) * x[row * n_in + i];
                        dabs += std::fabs(double(ad.a.values[k * n_in + i]) * x[row * n_in + i]);
                    }
                    for (int64_t c = 0; c < w; ++c) {
                        const double bo = ad.bt.values[k * w + c];
                        ref[row * w + c] += ad.scale * d * bo;
                        abs[row * w + c] += std::fabs(ad.scale * bo) * dabs;
                    }
                }
        }
        // each product: n_in + 1 roundings in A x (and the scale), then one term of a sum of at
        // most (segments x r + 1) terms
        const int depth = static_cast<int>(n_in) + 2 + static_cast<int>(adapters.size()) * 16 + 1;
        for (size_t i = 0; i < y[o].size(); ++i)
            ASSERT_NEAR(y[o][i], ref[i], gamma(depth) * abs[i] + 1e-30)
                << "output " << o << " row " << i / w << " column " << i % w;
    }
}

Adapter adapter(int r, int64_t n_in, int64_t n_out, bool f16, std::vector<int64_t> rows,
                uint32_t seed, int output = 0) {
    return {r,
            store(syslm::testing::random_floats(size_t(r) * n_in, seed, 0.3f), f16),
            store(syslm::testing::random_floats(size_t(r) * n_out, seed + 7, 0.3f), f16),
            0.5f + 0.25f * static_cast<float>(seed % 4),
            std::move(rows),
            output};
}

TEST(LoraKernels, UpdateOfSegmentsMatchesDouble) {
    const int64_t rows = 11;
    for (bool f16 : {false, true})
        for (auto [n_in, n_out] : {std::pair<int64_t, int64_t>{37, 131}, {64, 200}, {131, 5}})
            for (int threads : {1, 2, 3}) {
                SCOPED_TRACE(::testing::Message() << "f16 " << f16 << " n_in " << n_in << " n_out "
                                                  << n_out << " threads " << threads);
                // every row in one segment (rows 3 and 9 in none): the one-pass path; the second
                // adapter's 6 rows make two groups
                check_update({adapter(4, n_in, n_out, f16, {0, 7}, 1),
                              adapter(16, n_in, n_out, f16, {1, 2, 5, 6, 8, 10}, 2),
                              adapter(3, n_in, n_out, f16, {4}, 3)},
                             rows, n_in, {n_out}, f16, threads, 11);
                // rows 2 and 5 under two adapters each: the column-split path
                check_update({adapter(4, n_in, n_out, f16, {0, 2, 5}, 4),
                              adapter(5, n_in, n_out, f16, {2, 3, 5, 9}, 5)},
                             rows, n_in, {n_out}, f16, threads, 12);
                // two outputs of different widths from one x (as q and k): the same rows in a
                // segment of each stay the one-pass path; a row twice in one output does not
                const int64_t n_out2 = n_out / 2 + 3;
                check_update({adapter(4, n_in, n_out, f16, {0, 1, 2, 3, 4, 5, 6}, 6, 0),
                              adapter(8, n_in, n_out2, f16, {0, 1, 2, 3, 4, 5, 6}, 7, 1),
                              adapter(2, n_in, n_out2, f16, {7, 8}, 8, 1)},
                             rows, n_in, {n_out, n_out2}, f16, threads, 13);
                check_update({adapter(4, n_in, n_out, f16, {0, 1, 2}, 9, 0),
                              adapter(8, n_in, n_out2, f16, {0, 1, 2}, 10, 1),
                              adapter(2, n_in, n_out2, f16, {2, 8}, 11, 1)},
                             rows, n_in, {n_out, n_out2}, f16, threads, 14);
            }
}

}  // namespace
}  // namespace syslm::kernels
