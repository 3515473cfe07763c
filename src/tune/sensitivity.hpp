// How much each weight matrix's quantization costs in quality: for every quantizable matrix t
// and every candidate type q, the mean KL(reference || model) over the calibration tokens of the
// model with only t stored as q (everything else as in the file), measured by running it. These
// are the tuner's per-tensor costs; the allocation (tune/allocate.hpp) adds them up, and the
// measured front corrects the sum.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace syslm::compress {
class ImportanceMatrix;
}

namespace syslm::tune {

struct TypeCost {
    DType type;
    uint64_t bytes = 0;  // the tensor stored as this type
    double kl = 0;       // mean KL of the model with only this tensor of this type, nats/token
    double cost = -1;    // what the allocation minimises (predicted seconds); < 0: the bytes
    // Importance-weighted squared error of the tensor stored as this type (sum over rows and
    // columns of importance_j * (w - q(w))^2): the output error energy it adds on the
    // calibration activations. Filled in the proxy mode.
    double weighted_error = 0;
    bool measured = true;  // false: kl estimated from the weighted error (proxy mode)
    double goal_cost() const { return cost >= 0 ? cost : static_cast<double>(bytes); }
};

struct TensorSensitivity {
    std::string name;
    std::vector<int64_t> ne;
    DType file_type;
    uint64_t file_bytes = 0;
    std::vector<TypeCost> options;  // the candidate types whose block fits its rows
};

struct SensitivityOptions {
    std::vector<DType> types;   // candidate types (those that do not fit a row are skipped)
    int n_ctx = 256;            // tokens per calibration chunk
    int max_chunks = 2;         // chunks of the calibration tokens used
    int threads = 0;            // <= 0: all cores
    const compress::ImportanceMatrix* imatrix = nullptr;  // weighted quantizers where it has the tensor
    // Called after each (tensor, type) measured: done, total.
    std::function<void(size_t, size_t)> progress;
    // Proxy mode for large models: per tensor, only the type whose weighted error is the median
    // of its options is run; the other types' KLs are that KL scaled by their weighted error over
    // its (KL is quadratic in small perturbations, so about linear in the error energy). About
    // 1/#types of the forward passes; the weighted errors are estimated on a quarter of the rows.
    bool proxy = false;
};

// Importance-weighted squared error of `original` (float rows of n_per_row) against `quantized`
// (the same rows as `type`); importance empty: uniform.
double weighted_error(std::span<const float> original, std::span<const uint8_t> quantized,
                      DType type, int64_t n_per_row, std::span<const float> importance);

// Throws Error naming the file when it cannot be read or the tokens are fewer than one chunk.
std::vector<TensorSensitivity> measure_sensitivity(const std::string& model_path,
                                                   std::span<const int32_t> calibration,
                                                   const SensitivityOptions& options);

// Mean KL(p || q) over rows of logits (n_rows x n_vocab each), in nats; p is the reference.
double mean_kl(std::span<const float> ref_logits, std::span<const float> logits, int64_t n_vocab);

}  // namespace syslm::tune
