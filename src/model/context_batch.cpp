#include "model/context_batch.hpp"

#include <algorithm>
#include <tuple>

#include "core/error.hpp"

namespace syslm::model {

// Several contexts' rows, one after another: each a ContiguousRows over its own cache, called
// with its own rows' part of the batch's buffers, so that each computes what it would alone.
class SessionRows final : public KvRows {
public:
    void clear() {
        parts_.clear();
        starts_.clear();
        rows_ = 0;
    }
    void add(KVCache& cache, int64_t n_past, int64_t n) {
        starts_.push_back(rows_);
        parts_.emplace_back(cache, n_past, n);
        rows_ += n;
    }
    int64_t position(int64_t row) const override {
        const size_t i = part_of(row);
        return parts_[i].position(row - starts_[i]);
    }
    KvTypes kv_types() const override { return parts_.front().kv_types(); }
    void store(int il, int64_t row, const float* k, const float* v) override {
        const size_t i = part_of(row);
        parts_[i].store(il, row - starts_[i], k, v);
    }
    void attend(int il, const kernels::AttentionShape& shape, const float* q, float* out,
                backend::Backend& be) override {
        const int64_t q_dim = static_cast<int64_t>(shape.n_head) * shape.head_dim;
        for (size_t i = 0; i < parts_.size(); ++i)
            parts_[i].attend(il, shape, q + starts_[i] * q_dim, out + starts_[i] * q_dim, be);
    }
    const float* conv_lag(int il, int64_t row, int lag, const float* a, int64_t dim,
                          float* scratch) override {
        const size_t i = part_of(row);
        return parts_[i].conv_lag(il, row - starts_[i], lag, a + starts_[i] * dim, dim, scratch);
    }
    void store_conv(int il, int64_t row, const float* a) override {
        const size_t i = part_of(row);
        parts_[i].store_conv(il, row - starts_[i], a);
    }

private:
    size_t part_of(int64_t row) const {
        return static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), row) -
                                   starts_.begin()) -
               1;
    }
    std::vector<ContiguousRows> parts_;
    std::vector<int64_t> starts_;
    int64_t rows_ = 0;
};

namespace {

// The pass an item's rows go in: token ids or residual rows, from and up to which layers.
std::tuple<bool, int, int> pass_of(const ContextBatch::Item& it) {
    return {it.tokens.empty(), it.first_layer, it.end_layer};
}

// Floats of an item's output (n rows): every row's residual, or every row's or the last row's
// logits.
size_t out_size(const ContextBatch::Item& it, int64_t n, const HParams& hp) {
    if (it.end_layer >= 0) return static_cast<size_t>(n * hp.n_embd);
    return static_cast<size_t>((it.all_logits ? n : 1) * hp.n_vocab);
}

}  // namespace

ContextBatch::ContextBatch(const Model& model, int n_batch, int n_threads)
    : model_(model), forward_(model, n_batch, n_threads), rows_(std::make_unique<SessionRows>()) {}

ContextBatch::~ContextBatch() = default;

int64_t ContextBatch::rows(const Item& it) const {
    return it.tokens.empty() ? static_cast<int64_t>(it.residual.size()) / model_.hparams().n_embd
                             : static_cast<int64_t>(it.tokens.size());
}

void ContextBatch::check(const Item& it) const {
    const HParams& hp = model_.hparams();
    const int64_t E = hp.n_embd;
    SYSLM_CHECK(it.ctx && &it.ctx->model() == &model_, "batch: a context of another model");
    SYSLM_CHECK(it.tokens.empty() != it.residual.empty(), "batch: token ids or residual rows");
    SYSLM_CHECK(it.tokens.empty() || it.first_layer == 0,
                "batch: token rows start at the embedding");
    SYSLM_CHECK(it.first_layer >= 0 && it.first_layer <= hp.n_layer, "batch: layer ",
                it.first_layer, " of a model of ", hp.n_layer);
    SYSLM_CHECK(it.end_layer < 0 || (it.end_layer >= it.first_layer && it.end_layer <= hp.n_layer),
                "batch: rows from layer ", it.first_layer, " stopping at ", it.end_layer);
    SYSLM_CHECK(it.residual.size() % static_cast<size_t>(E) == 0,
                "batch: residual values that are not rows of ", E);
    const int64_t n = rows(it);
    SYSLM_CHECK(it.ctx->n_past() + n <= it.ctx->n_ctx(),
                "batch: context is full: ", it.ctx->n_past(), " + ", n, " rows exceed ",
                it.ctx->n_ctx());
    for (int32_t t : it.tokens)
        SYSLM_CHECK(t >= 0 && t < hp.n_vocab, "token id ", t, " is outside the vocabulary (",
                    hp.n_vocab, " tokens)");
}

void ContextBatch::run(std::span<Item> items) {
    const HParams& hp = model_.hparams();
    int64_t total = 0;
    size_t out_floats = 0;
    order_.clear();
    for (Item& it : items) {
        check(it);
        SYSLM_CHECK(it.ctx->kv_cache().types() == items[0].ctx->kv_cache().types(),
                    "batch: contexts with different cache types");
        const int64_t n = rows(it);
        total += n;
        out_floats += out_size(it, n, hp);
        order_.push_back(&it);
    }
    SYSLM_CHECK(total <= forward_.n_batch(), "batch: ", total, " rows for a batch of ",
                forward_.n_batch());
    logits_.resize(out_floats);
    out_at_ = 0;
    // One pass per kind of row (pass_of), in a stable order.
    std::stable_sort(order_.begin(), order_.end(),
                     [](const Item* a, const Item* b) { return pass_of(*a) < pass_of(*b); });
    for (size_t i = 0, j = 0; i < order_.size(); i = j) {
        while (j < order_.size() && pass_of(*order_[j]) == pass_of(*order_[i])) ++j;
        run_group(std::span<Item*>(order_).subspan(i, j - i));
    }
}

void ContextBatch::run_group(std::span<Item*> group) {
    const HParams& hp = model_.hparams();
    SessionRows& kv = *rows_;
    kv.clear();
    tokens_.clear();
    residual_.clear();
    logit_rows_.clear();
    int64_t row = 0;
    for (Item* it : group) {
        const int64_t n = rows(*it);
        kv.add(it->ctx->cache_, it->ctx->n_past_, n);
        tokens_.insert(tokens_.end(), it->tokens.begin(), it->tokens.end());
        residual_.insert(residual_.end(), it->residual.begin(), it->residual.end());
        const bool every_row = it->all_logits || it->end_layer >= 0;
        for (int64_t r = every_row ? 0 : n - 1; r < n; ++r) logit_rows_.push_back(row + r);
        row += n;
    }
    float* out = logits_.data() + out_at_;
    const int first = group.front()->first_layer;
    forward_.set_end_layer(group.front()->end_layer);
    struct Restore {
        Forward& f;
        ~Restore() { f.set_end_layer(-1); }
    } restore{forward_};
    if (group.front()->tokens.empty())
        forward_.run_from(first, residual_, kv, logit_rows_, out);
    else
        forward_.run(tokens_, kv, logit_rows_, out);
    for (Item* it : group) {
        const int64_t n = rows(*it);
        const size_t k = out_size(*it, n, hp);
        it->logits = std::span<const float>(logits_.data() + out_at_, k);
        out_at_ += k;
        it->ctx->n_past_ += static_cast<int>(n);
    }
}

}  // namespace syslm::model
