// The decode-time model the allocation minimises, fitted to this machine's measurements: a token
// costs a fixed time plus, for each weight type, the bytes of that type decode reads times the
// type's seconds per byte. When decode is bandwidth-bound every type's rate is about the memory's;
// when the model sits in the caches the kernels' own speeds differ (Q4_0 unpacks faster than the
// K-quants), and the fit learns that from the files already timed (the stock recipes, the tuned
// points), so that "fewer bytes" is not mistaken for "faster".
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "core/dtype.hpp"
#include "io/gguf.hpp"

namespace syslm::tune {

using BytesByType = std::map<DType, double>;

// The bytes decode reads per token, by type: every weight matrix except the token embeddings
// when the model has its own output matrix (a token reads one row of them).
BytesByType decode_bytes(const io::GGUFFile& file);

struct DecodeTimeSample {
    BytesByType bytes;
    double seconds_per_token = 0;
};

struct DecodeCostModel {
    double fixed_s = 0;                  // per token, whatever the types
    double mean_s_per_byte = 0;          // the one-rate fit, used for types never observed
    std::map<DType, double> s_per_byte;  // fitted per type
    int samples = 0;

    double seconds_per_byte(DType t) const;
    double predict(const BytesByType& bytes) const;
};

// Least squares on relative error (each sample weighted by 1 / its time squared): first one
// rate for all bytes plus the fixed time, then a rate per type pulled towards that common rate
// (ridge), so that a type seen in few files stays near the common figure. Needs >= 2 samples.
// The fixed time is kept below the fastest sample's time (noisy timings can fit it above).
DecodeCostModel fit_decode_cost(const std::vector<DecodeTimeSample>& samples, double ridge = 0.5);

}  // namespace syslm::tune
