// Gradient compression for the data-parallel reduction: a compressor turns n floats into a
// fixed number of bytes (known from n alone, so receivers know what to expect) and back. Error
// feedback lives with the caller (GradientReducer): what a compression loses is added to the
// next step's gradient, so nothing is lost for good, only delayed.
//   int8: one scale per block (max |x| / 127) and one signed byte per value (4x fewer bytes);
//   topk: the k = ceil(ratio x n) largest magnitudes: their positions (u32 indices, or a bitmap
//         of n bits when that is smaller) and their values in bf16 (12x fewer bytes at 10%);
//   sign: one bit per value and one scale (mean |x|) per group of kSignGroup values, as 1-bit
//         Adam / signSGD with error feedback (21x fewer bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace syslm::parallel {

enum class Compression { None, Int8, TopK, Sign };
// Values sharing one scale in sign compression: 1.5 bits per value. Measured on the KJV model
// (bench/parallel/bench_grad_compress.py): groups of 1024 end 1.2% above the exact run's validation
// loss, 128 1.0%, 64 0.85%.
constexpr size_t kSignGroup = 64;
Compression compression_kind(const std::string& name);  // "none" | "int8" | "topk" | "sign"
const char* compression_name(Compression c);

class Compressor {
public:
    explicit Compressor(Compression kind, double topk_ratio = 0.15);
    Compression kind() const { return kind_; }
    size_t bytes(size_t n) const;  // the compressed size of n floats
    // Writes bytes(n) bytes.
    void compress(const float* x, size_t n, uint8_t* out) const;
    // Compresses x + error (error feedback) and leaves in `error` what the message loses:
    // (x + error) - decoded. `scratch`: room for n floats.
    void compress_with_feedback(const float* x, float* error, size_t n, uint8_t* out,
                                float* scratch) const;
    // Adds the decoded values to out (n floats).
    void decompress_add(const uint8_t* in, size_t n, float* out) const;

private:
    size_t k_of(size_t n) const;
    bool uses_bitmap(size_t n) const;
    size_t positions_bytes(size_t n) const;
    Compression kind_;
    double ratio_;
    mutable std::vector<uint32_t> order_;  // top-k selection scratch (one thread uses it)
};

}  // namespace syslm::parallel
