// Gradient compression for the data-parallel reduction: a compressor turns n floats into a
// fixed number of bytes (known from n alone, so receivers know what to expect) and back. Error
// feedback lives with the caller (GradientReducer): what a compression loses is added to the
// next step's gradient, so nothing is lost for good, only delayed.
//   int8: one scale per block (max |x| / 127) and one signed byte per value (4x fewer bytes);
//   topk: the k = ceil(ratio x n) largest magnitudes as (u32 index, f32 value) pairs;
//   sign: one bit per value and one scale (mean |x|) per group of kSignGroup values, as 1-bit
//         Adam / signSGD with error feedback (31x fewer bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace syslm::dist {

enum class Compression { None, Int8, TopK, Sign };
constexpr size_t kSignGroup = 1024;  // values sharing one scale in sign compression
Compression compression_kind(const std::string& name);  // "none" | "int8" | "topk" | "sign"
const char* compression_name(Compression c);

class Compressor {
public:
    explicit Compressor(Compression kind, double topk_ratio = 0.01);
    Compression kind() const { return kind_; }
    size_t bytes(size_t n) const;  // the compressed size of n floats
    // Writes bytes(n) bytes.
    void compress(const float* x, size_t n, uint8_t* out) const;
    // Adds the decoded values to out (n floats).
    void decompress_add(const uint8_t* in, size_t n, float* out) const;

private:
    size_t k_of(size_t n) const;
    Compression kind_;
    double ratio_;
    mutable std::vector<uint32_t> order_;  // top-k selection scratch (one thread uses it)
};

}  // namespace syslm::dist
