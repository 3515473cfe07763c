// The rows of one serving step: the new tokens of several sequences, each over its own paged KV
// cache (infer/kv_pages.hpp), laid out sequence after sequence, for model::Forward. Each
// sequence's pages must already hold room for its new positions (KvPages::append).
#pragma once

#include <cstdint>
#include <vector>

#include "infer/kv_pages.hpp"
#include "kernels/cpu/linear_attention.hpp"
#include "model/transformer.hpp"

namespace syslm::infer {

class PagedRows final : public model::KvRows {
public:
    explicit PagedRows(KvPages& pages) : pages_(pages) {}

    // Starts a new step's layout (keeps capacity).
    void clear();
    // What a sequence runs with besides its pages.
    struct Options {
        int window = 0;          // its local layers' window (0: the model's)
        float expert_top_p = 0;  // a top-p MoE model's p (0: the model's)
        // Its linear-attention layers' recurrent states, linear[il] (null: sums over the pages).
        kernels::LinearState* linear = nullptr;
    };
    // The next n rows are positions pos0 .. pos0 + n - 1 of the sequence whose table is t.
    void add(const BlockTable& t, int64_t pos0, int64_t n, const Options& o);
    void add(const BlockTable& t, int64_t pos0, int64_t n) { add(t, pos0, n, Options{}); }
    int64_t size() const { return static_cast<int64_t>(row_seg_.size()); }

    int64_t position(int64_t row) const override;
    model::KvTypes kv_types() const override { return pages_.config().types; }
    void store(int il, int64_t row, const float* k, const float* v) override;
    void attend(int il, const kernels::AttentionShape& shape, const float* q, float* out,
                backend::Backend& be) override;
    const float* conv_lag(int il, int64_t row, int lag, const float* a, int64_t dim,
                          float* scratch) override;
    void store_conv(int il, int64_t row, const float* a) override;
    float expert_top_p(int64_t row) const override;

private:
    struct Segment {
        const BlockTable* table;
        int64_t pos0, n, row0;
        Options o;
    };
    KvPages& pages_;
    std::vector<Segment> segs_;
    std::vector<int32_t> row_seg_;            // segment of each row
    std::vector<const void*> k_ptr_, v_ptr_;  // one layer's page pointers, segment after segment
    std::vector<kernels::PagedSequence> seqs_;
};

}  // namespace syslm::infer
