#include "core/dtype.hpp"

#include <array>
#include <cctype>

#include "core/error.hpp"

namespace syslm {
namespace {

constexpr int64_t QK = 32;     // block of the legacy types
constexpr int64_t QK_K = 256;  // super-block of the K-quants

struct Row {
    DType type;
    DTypeInfo info;
};

// Block sizes in bytes follow ggml-common.h exactly (see kernels/quants for the structs).
constexpr std::array kTypes = {
    Row{DType::F32, {"F32", 1, 4, false}},
    Row{DType::F16, {"F16", 1, 2, false}},
    Row{DType::BF16, {"BF16", 1, 2, false}},
    Row{DType::Q4_0, {"Q4_0", QK, 2 + QK / 2, true}},
    Row{DType::Q4_1, {"Q4_1", QK, 4 + QK / 2, true}},
    Row{DType::Q5_0, {"Q5_0", QK, 2 + 4 + QK / 2, true}},
    Row{DType::Q5_1, {"Q5_1", QK, 4 + 4 + QK / 2, true}},
    Row{DType::Q8_0, {"Q8_0", QK, 2 + QK, true}},
    Row{DType::Q8_1, {"Q8_1", QK, 4 + QK, true}},
    Row{DType::Q2_K, {"Q2_K", QK_K, QK_K / 16 + QK_K / 4 + 2 + 2, true}},
    Row{DType::Q3_K, {"Q3_K", QK_K, QK_K / 8 + QK_K / 4 + 12 + 2, true}},
    Row{DType::Q4_K, {"Q4_K", QK_K, 2 + 2 + 12 + QK_K / 2, true}},
    Row{DType::Q5_K, {"Q5_K", QK_K, 2 + 2 + 12 + QK_K / 8 + QK_K / 2, true}},
    Row{DType::Q6_K, {"Q6_K", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, true}},
    Row{DType::Q8_K, {"Q8_K", QK_K, 4 + QK_K + QK_K / 16 * 2, true}},
    Row{DType::I8, {"I8", 1, 1, false}},
    Row{DType::I16, {"I16", 1, 2, false}},
    Row{DType::I32, {"I32", 1, 4, false}},
    Row{DType::I64, {"I64", 1, 8, false}},
    Row{DType::F64, {"F64", 1, 8, false}},
    Row{DType::Q4_0_G8, {"Q4_0_G8", 8 * QK, 8 * (2 + QK / 2), true, true}},
    Row{DType::Q8_0_G8, {"Q8_0_G8", 8 * QK, 8 * (4 + 4 + QK), true, true}},
    Row{DType::Q8_0_G8W, {"Q8_0_G8W", 8 * QK, 8 * (2 + QK), true, true}},
    Row{DType::Q4_K_LANE, {"Q4_K_LANE", QK_K, 2 + 2 + 12 + QK_K / 2, true, true}},
    Row{DType::Q5_K_LANE, {"Q5_K_LANE", QK_K, 2 + 2 + 12 + QK_K / 8 + QK_K / 2, true, true}},
    Row{DType::Q6_K_LANE, {"Q6_K_LANE", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, true, true}},
    Row{DType::Q8_K_LANE, {"Q8_K_LANE", QK_K, 4 + QK_K + QK_K / 16 * 2, true, true}},
};

}  // namespace

const DTypeInfo* dtype_info(uint32_t id) {
    for (const auto& r : kTypes)
        if (static_cast<uint32_t>(r.type) == id) return &r.info;
    return nullptr;
}

const DTypeInfo& dtype_info(DType t) {
    const DTypeInfo* info = dtype_info(static_cast<uint32_t>(t));
    if (!info) fail("unknown tensor type id ", static_cast<uint32_t>(t));
    return *info;
}

std::optional<DType> dtype_from_name(std::string_view name) {
    for (const auto& r : kTypes) {
        if (r.info.runtime_only || r.info.name.size() != name.size()) continue;
        bool same = true;
        for (size_t i = 0; i < name.size() && same; ++i)
            same = std::toupper(static_cast<unsigned char>(name[i])) == r.info.name[i];
        if (same) return r.type;
    }
    return std::nullopt;
}

size_t row_bytes(DType t, int64_t n) {
    const DTypeInfo& info = dtype_info(t);
    SYSLM_CHECK(n % info.block_size == 0, "row of ", n, " elements is not a multiple of the ",
                info.name, " block size ", info.block_size);
    return static_cast<size_t>(n / info.block_size) * info.type_size;
}

}  // namespace syslm
