// Keys (after RoPE) and values of every processed position, per layer, in float32:
// layer-major, then position, then kv_dim. Contiguous per layer so attention streams it.
#pragma once

#include <cstdint>
#include <vector>

#include "model/hparams.hpp"

namespace syslm::model {

class KVCache {
public:
    KVCache(const HParams& hp, int n_ctx);

    int n_ctx() const { return n_ctx_; }
    int64_t kv_dim() const { return kv_dim_; }
    float* k(int layer, int64_t pos) { return k_.data() + offset(layer, pos); }
    float* v(int layer, int64_t pos) { return v_.data() + offset(layer, pos); }
    size_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

private:
    size_t offset(int layer, int64_t pos) const {
        return (static_cast<size_t>(layer) * n_ctx_ + static_cast<size_t>(pos)) * kv_dim_;
    }
    int n_ctx_;
    int64_t kv_dim_;
    std::vector<float> k_, v_;
};

}  // namespace syslm::model
