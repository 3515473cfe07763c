// The new rows of several contexts of one model in one forward pass: a cloud's sessions for its
// edges (serve/cloud_sessions), each over its own contiguous cache from its own position, the
// weights read once for all of them. Rows that start at the embedding (token ids) and rows that
// enter at a layer (an edge's residual stream: a split model) go in one pass per first layer,
// and rows that stop at a layer (an edge's half) in one pass per last layer.
// A context batched alone computes what its own forward computes, bit for bit.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "model/transformer.hpp"

namespace syslm::model {

class ContextBatch {
public:
    // n_batch: the most rows of one run (every item together).
    ContextBatch(const Model& model, int n_batch, int n_threads);

    struct Item {
        Context* ctx = nullptr;           // of the batch's model; appended to from its n_past()
        std::span<const int32_t> tokens;  // rows from the embedding; or, with tokens empty,
        std::span<const float> residual;  // rows (of n_embd) entering first_layer
        int first_layer = 0;
        // >= 0: stop before this layer and give every row's residual stream (n_embd floats a
        // row; an edge's half of a split model) instead of logits.
        int end_layer = -1;
        bool all_logits = false;        // every row's logits, else the last row's
        std::span<const float> logits;  // out (logits, or residual rows): until the next run
    };
    // Throws Error (nothing run) for more rows than n_batch, an item check() refuses, or caches
    // of different types.
    void run(std::span<Item> items);
    // Throws Error for an item that cannot run: a context of another model or too full for its
    // rows, both or neither of tokens and residual rows, a token outside the vocabulary, layers
    // out of range.
    void check(const Item& item) const;
    int64_t rows(const Item& item) const;  // the item's rows (tokens or residual rows)
    int n_batch() const { return forward_.n_batch(); }
    ~ContextBatch();

private:
    void run_group(std::span<Item*> group);
    const Model& model_;
    Forward forward_;
    // Kept between runs (their capacity: nothing is allocated per step once warm).
    std::unique_ptr<class SessionRows> rows_;
    std::vector<Item*> order_;
    std::vector<float> logits_;
    std::vector<int32_t> tokens_;
    std::vector<float> residual_;
    std::vector<int64_t> logit_rows_;
    size_t out_at_ = 0;  // floats of logits_ given out so far in this run
};

}  // namespace syslm::model
