// Hidden-state rows on the wire between an edge and a cloud (docs/design/edge_cloud.md): f16,
// 2 bytes a value; or int8 with one f32 scale per row (absmax / 127), 1 byte a value and 4 a
// row; or f32 as computed (4 bytes a value: the split then changes nothing). Little-endian, rows one after another. Decoding checks the size and the scales, so a
// truncated or corrupt body is an Error naming what is wrong, never rows of garbage.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace syslm::infer {

enum class WireType { F16, Int8, F32 };

WireType wire_type(std::string_view name);  // "f16" | "int8" | "f32"; throws Error otherwise
const char* wire_name(WireType t);
size_t wire_bytes(WireType t, int64_t rows, int64_t width);

// x: rows x width floats. Throws Error for a value that is not finite, or (f16) beyond f16's
// range, naming its row and column.
std::string encode_rows(WireType t, std::span<const float> x, int64_t rows, int64_t width);
// Into out (rows x width); throws Error when the bytes are not exactly rows x width of type t
// or a scale is negative or not finite.
void decode_rows(WireType t, std::string_view bytes, int64_t rows, int64_t width, float* out);

}  // namespace syslm::infer
