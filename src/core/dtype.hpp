// Element types of tensors. The numeric values are GGML's type ids, which GGUF stores on disk,
// so a DType read from a file is the same number llama.cpp writes.
// Quantized types are stored in blocks: block_size elements packed into type_size bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace syslm {

enum class DType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    BF16 = 30,
    // Run-time layouts, never in a file (GGUF readers and writers refuse them): weights repacked
    // at load time for the SIMD kernels, and their activation partners (kernels/repack.hpp).
    Q4_0_G8 = 0x10002,    // Q4_0 in groups of 8 blocks: the 8 scales first, then the 8 nibble sets
    Q8_0_G8 = 0x10008,    // Q8_0 activations laid out for Q4_0_G8 (block_layouts.hpp)
    Q8_0_G8W = 0x20008,   // Q8_0 weights in groups of 8 blocks, offset to u8 (block_layouts.hpp)
    Q4_K_LANE = 0x1000C,  // Q4_K with each block's levels in lane order (block_layouts.hpp)
    Q5_K_LANE = 0x1000D,  // Q5_K likewise
    Q6_K_LANE = 0x1000E,  // Q6_K likewise
    Q8_K_LANE = 0x1000F,  // Q8_K activations in lane order, partner of both
};

// Layout facts of one type (the compute functions live in kernels/, see kernels/type_traits.hpp).
struct DTypeInfo {
    std::string_view name;
    int64_t block_size;  // elements per block (1 for plain types)
    size_t type_size;    // bytes per block
    bool quantized;
    bool runtime_only = false;  // a load-time layout: not a GGUF type
};

// Returns nullptr for ids syslm does not know (e.g. IQ types), so readers can report them; file
// readers and writers must also refuse runtime_only types.
const DTypeInfo* dtype_info(uint32_t id);
const DTypeInfo& dtype_info(DType t);  // throws Error for unknown ids
inline std::string_view dtype_name(DType t) {
    return dtype_info(t).name;
}
// Case-insensitive ("q4_0", "F16"); file types only.
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes needed for one row of n elements; throws if n is not a multiple of the block size.
size_t row_bytes(DType t, int64_t n);

}  // namespace syslm
