#include "infer/wire_rows.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "core/half.hpp"

namespace syslm::infer {

namespace {

constexpr float kF16Max = 65504.0f;

void check_finite(std::span<const float> x, int64_t width, WireType t) {
    for (size_t i = 0; i < x.size(); ++i) {
        const bool ok = std::isfinite(x[i]) && (t != WireType::F16 || std::fabs(x[i]) <= kF16Max);
        SYSLM_CHECK(ok, "wire: row ", static_cast<int64_t>(i) / width, " column ",
                    static_cast<int64_t>(i) % width, " holds ", x[i],
                    t == WireType::F16 ? ", which f16 cannot carry (use int8)" : ", not finite");
    }
}

}  // namespace

WireType wire_type(std::string_view name) {
    if (name == "f16") return WireType::F16;
    if (name == "int8") return WireType::Int8;
    if (name == "f32") return WireType::F32;
    fail("wire format '", std::string(name), "': expected f16, int8 or f32");
}

const char* wire_name(WireType t) {
    return t == WireType::F16 ? "f16" : t == WireType::Int8 ? "int8" : "f32";
}

size_t wire_bytes(WireType t, int64_t rows, int64_t width) {
    const auto r = static_cast<size_t>(rows), w = static_cast<size_t>(width);
    return t == WireType::F16 ? r * w * 2 : t == WireType::F32 ? r * w * 4 : r * (w + sizeof(float));
}

std::string encode_rows(WireType t, std::span<const float> x, int64_t rows, int64_t width) {
    SYSLM_CHECK(rows >= 0 && width > 0 && x.size() == static_cast<size_t>(rows * width),
                "wire: ", x.size(), " values are not ", rows, " rows of ", width);
    check_finite(x, width, t);
    std::string out(wire_bytes(t, rows, width), '\0');
    if (t == WireType::F32) {  // x86 and ARM: little-endian already
        std::memcpy(out.data(), x.data(), out.size());
        return out;
    }
    char* p = out.data();
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x.data() + r * width;
        if (t == WireType::F16) {
            for (int64_t i = 0; i < width; ++i, p += 2) {
                const uint16_t h = f32_to_f16(row[i]);
                p[0] = static_cast<char>(h & 0xff);
                p[1] = static_cast<char>(h >> 8);
            }
            continue;
        }
        float amax = 0;
        for (int64_t i = 0; i < width; ++i) amax = std::max(amax, std::fabs(row[i]));
        const float scale = amax / 127.0f;
        std::memcpy(p, &scale, sizeof scale);  // x86 and ARM: little-endian already
        p += sizeof scale;
        const float inv = scale > 0 ? 1.0f / scale : 0.0f;
        for (int64_t i = 0; i < width; ++i)
            *p++ = static_cast<char>(
                static_cast<int8_t>(std::clamp(std::nearbyint(row[i] * inv), -127.0f, 127.0f)));
    }
    return out;
}

void decode_rows(WireType t, std::string_view bytes, int64_t rows, int64_t width, float* out) {
    SYSLM_CHECK(rows >= 0 && width > 0, "wire: ", rows, " rows of ", width, " values");
    SYSLM_CHECK(bytes.size() == wire_bytes(t, rows, width), "wire: ", bytes.size(),
                " bytes are not ", rows, " rows of ", width, " ", wire_name(t), " values (",
                wire_bytes(t, rows, width), " bytes)");
    if (t == WireType::F32) {
        std::memcpy(out, bytes.data(), bytes.size());
        return;
    }
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    for (int64_t r = 0; r < rows; ++r) {
        float* row = out + r * width;
        if (t == WireType::F16) {
            for (int64_t i = 0; i < width; ++i, p += 2)
                row[i] = f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8)));
            continue;
        }
        float scale;
        std::memcpy(&scale, p, sizeof scale);
        p += sizeof scale;
        SYSLM_CHECK(std::isfinite(scale) && scale >= 0, "wire: row ", r, " has scale ", scale);
        for (int64_t i = 0; i < width; ++i) row[i] = scale * static_cast<int8_t>(*p++);
    }
}

}  // namespace syslm::infer
