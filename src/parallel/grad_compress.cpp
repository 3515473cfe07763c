#include "parallel/grad_compress.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"

namespace syslm::parallel {

Compression compression_kind(const std::string& name) {
    if (name == "none") return Compression::None;
    if (name == "int8") return Compression::Int8;
    if (name == "topk") return Compression::TopK;
    if (name == "sign" || name == "1bit") return Compression::Sign;
    fail("unknown gradient compression '", name, "' (none, int8, topk, sign)");
}

const char* compression_name(Compression c) {
    switch (c) {
        case Compression::None: return "none";
        case Compression::Int8: return "int8";
        case Compression::TopK: return "topk";
        case Compression::Sign: return "sign";
    }
    return "?";
}

Compressor::Compressor(Compression kind, double topk_ratio) : kind_(kind), ratio_(topk_ratio) {
    SYSLM_CHECK(topk_ratio > 0 && topk_ratio <= 1, "top-k ratio ", topk_ratio,
                " must be in (0, 1]");
}

size_t Compressor::k_of(size_t n) const {
    return n == 0 ? 0 : std::max<size_t>(1, static_cast<size_t>(std::ceil(ratio_ * n)));
}

// Which k of the n values a top-k message holds: a list of u32 indices, or a bitmap when that
// is smaller (k > n / 32).
bool Compressor::uses_bitmap(size_t n) const { return (n + 7) / 8 < k_of(n) * sizeof(uint32_t); }
size_t Compressor::positions_bytes(size_t n) const {
    return uses_bitmap(n) ? (n + 7) / 8 : k_of(n) * sizeof(uint32_t);
}

size_t Compressor::bytes(size_t n) const {
    switch (kind_) {
        case Compression::None: return n * sizeof(float);
        case Compression::Int8: return sizeof(float) + n;
        case Compression::TopK: return positions_bytes(n) + k_of(n) * sizeof(uint16_t);
        case Compression::Sign: return sizeof(float) * ((n + kSignGroup - 1) / kSignGroup) + (n + 7) / 8;
    }
    return 0;
}

namespace {

// One sign group of m <= kSignGroup values starting at a byte boundary of the bits: y = x (+ the
// error fed back), its scale (mean |y|) and its sign bits; `error` (when given) becomes what the
// message loses, y - decoded. Written in 8 lanes so that the compiler vectorizes it: the
// compressors run on the communication thread beside the backward, once per value and step.
void sign_group(const float* x, float* error, size_t m, uint8_t* scale_out, uint8_t* bits) {
    float y[kSignGroup];
    if (error)
        for (size_t i = 0; i < m; ++i) y[i] = x[i] + error[i];
    else
        std::copy_n(x, m, y);
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0}, sum = 0;
    size_t i = 0;
    for (; i + 8 <= m; i += 8)
        for (size_t k = 0; k < 8; ++k) lane[k] += std::fabs(y[i + k]);
    for (; i < m; ++i) sum += std::fabs(y[i]);
    for (double l : lane) sum += l;
    const float scale = static_cast<float>(sum / static_cast<double>(m));
    std::memcpy(scale_out, &scale, sizeof scale);
    for (size_t j = 0; j * 8 < m; ++j) {
        unsigned byte = 0;
        for (size_t k = 0; k < 8 && j * 8 + k < m; ++k) byte |= (y[j * 8 + k] < 0 ? 1u : 0u) << k;
        bits[j] = static_cast<uint8_t>(byte);
    }
    if (error)
        for (size_t k = 0; k < m; ++k) error[k] = y[k] - (y[k] < 0 ? -scale : scale);
}

// std::lround for |v| < 2^23 (ties away from zero), in a form that vectorizes (lround does not):
// truncate, then step away from zero when the part cut off is at least a half.
inline int round_small(float v) {
    const int t = static_cast<int>(v);
    const float cut = v - static_cast<float>(t);
    return t + (cut >= 0.5f ? 1 : 0) - (cut <= -0.5f ? 1 : 0);
}

}  // namespace

void Compressor::compress_with_feedback(const float* x, float* error, size_t n, uint8_t* out,
                                        float* scratch) const {
    if (kind_ == Compression::Sign) {
        const size_t groups = (n + kSignGroup - 1) / kSignGroup;
        uint8_t* bits = out + groups * sizeof(float);
        for (size_t gi = 0; gi < groups; ++gi) {
            const size_t b = gi * kSignGroup;
            sign_group(x + b, error + b, std::min(kSignGroup, n - b), out + gi * sizeof(float),
                       bits + b / 8);
        }
        return;
    }
    for (size_t i = 0; i < n; ++i) scratch[i] = x[i] + error[i];
    compress(scratch, n, out);
    for (size_t i = 0; i < n; ++i) error[i] = scratch[i];
    for (size_t i = 0; i < n; ++i) scratch[i] = 0.0f;
    decompress_add(out, n, scratch);
    for (size_t i = 0; i < n; ++i) error[i] -= scratch[i];
}

void Compressor::compress(const float* x, size_t n, uint8_t* out) const {
    switch (kind_) {
        case Compression::None:
            std::memcpy(out, x, n * sizeof(float));
            return;
        case Compression::Int8: {
            float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            size_t i = 0;
            for (; i + 8 <= n; i += 8)
                for (size_t k = 0; k < 8; ++k) lane[k] = std::max(lane[k], std::fabs(x[i + k]));
            float amax = 0;
            for (; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
            for (float l : lane) amax = std::max(amax, l);
            const float scale = amax / 127.0f, inv = scale > 0 ? 1.0f / scale : 0.0f;
            std::memcpy(out, &scale, sizeof scale);
            int8_t* q = reinterpret_cast<int8_t*>(out + sizeof scale);
            for (i = 0; i < n; ++i)
                q[i] = static_cast<int8_t>(std::clamp(round_small(x[i] * inv), -127, 127));
            return;
        }
        case Compression::TopK: {
            const size_t k = k_of(n);
            std::vector<uint32_t>& idx = order_;
            idx.resize(n);
            std::iota(idx.begin(), idx.end(), 0u);
            // The k largest magnitudes; ties broken by index so every run picks the same.
            std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k - 1),
                             idx.end(), [&](uint32_t a, uint32_t b) {
                                 const float fa = std::fabs(x[a]), fb = std::fabs(x[b]);
                                 return fa > fb || (fa == fb && a < b);
                             });
            std::sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k));
            // Positions, then the values in bf16 in index order (error feedback carries the
            // rounding, as it carries everything not sent).
            if (uses_bitmap(n)) {
                std::memset(out, 0, (n + 7) / 8);
                for (size_t j = 0; j < k; ++j) out[idx[j] / 8] |= static_cast<uint8_t>(1u << (idx[j] % 8));
            } else {
                std::memcpy(out, idx.data(), k * sizeof(uint32_t));
            }
            uint8_t* values = out + positions_bytes(n);
            for (size_t j = 0; j < k; ++j) {
                const uint16_t h = f32_to_bf16(x[idx[j]]);
                std::memcpy(values + j * sizeof h, &h, sizeof h);
            }
            return;
        }
        case Compression::Sign: {
            // One scale (mean |x|) per group of kSignGroup values, then the sign bits.
            const size_t groups = (n + kSignGroup - 1) / kSignGroup;
            uint8_t* bits = out + groups * sizeof(float);
            for (size_t gi = 0; gi < groups; ++gi) {
                const size_t b = gi * kSignGroup;
                sign_group(x + b, nullptr, std::min(kSignGroup, n - b), out + gi * sizeof(float),
                           bits + b / 8);
            }
            return;
        }
    }
}

void Compressor::decompress_add(const uint8_t* in, size_t n, float* out) const {
    switch (kind_) {
        case Compression::None: {
            const float* x = reinterpret_cast<const float*>(in);
            for (size_t i = 0; i < n; ++i) out[i] += x[i];
            return;
        }
        case Compression::Int8: {
            float scale;
            std::memcpy(&scale, in, sizeof scale);
            const int8_t* q = reinterpret_cast<const int8_t*>(in + sizeof scale);
            for (size_t i = 0; i < n; ++i) out[i] += scale * static_cast<float>(q[i]);
            return;
        }
        case Compression::TopK: {
            const size_t k = k_of(n);
            const uint8_t* values = in + positions_bytes(n);
            auto add = [&](size_t j, size_t i) {
                uint16_t h;
                std::memcpy(&h, values + j * sizeof h, sizeof h);
                out[i] += bf16_to_f32(h);
            };
            if (uses_bitmap(n)) {
                size_t j = 0;
                for (size_t i = 0; i < n; ++i)
                    if (in[i / 8] >> (i % 8) & 1u) {
                        SYSLM_CHECK(j < k, "top-k gradient message: more than ", k, " positions");
                        add(j++, i);
                    }
                SYSLM_CHECK(j == k, "top-k gradient message: ", j, " positions, expected ", k);
            } else {
                for (size_t j = 0; j < k; ++j) {
                    uint32_t i;
                    std::memcpy(&i, in + j * sizeof i, sizeof i);
                    SYSLM_CHECK(i < n, "top-k gradient message: index ", i, " outside ", n);
                    add(j, i);
                }
            }
            return;
        }
        case Compression::Sign: {
            const size_t groups = (n + kSignGroup - 1) / kSignGroup;
            const uint8_t* bits = in + groups * sizeof(float);
            for (size_t gi = 0; gi < groups; ++gi) {
                float scale;
                std::memcpy(&scale, in + gi * sizeof(float), sizeof scale);
                const size_t b = gi * kSignGroup, e = std::min(n, b + kSignGroup);
                for (size_t j = b; j < e; j += 8) {  // a byte of signs at a time
                    const unsigned byte = bits[j / 8];
                    for (size_t k = 0; k < 8 && j + k < e; ++k)
                        out[j + k] += (byte >> k & 1u) ? -scale : scale;
                }
            }
            return;
        }
    }
}

}  // namespace syslm::parallel
