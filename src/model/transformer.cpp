#include "model/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/profiler.hpp"
#include "kernels/cpu/activations.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/moe_routing.hpp"
#include "kernels/cpu/norm.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::model {

using kernels::matmul;

Model::Model(const std::string& path) : Model(std::make_shared<const io::GGUFFile>(path)) {}

Model::Model(std::shared_ptr<const io::GGUFFile> file) : Model(std::move(file), {}) {}

Model::Model(std::shared_ptr<const io::GGUFFile> file, std::vector<TensorOverride> overrides)
    : file_(std::move(file)), overrides_(std::move(overrides)) {
    hp_ = load_hparams(*file_);
    w_ = load_weights(*file_, hp_, overrides_);
    if (hp_.has_rope()) rope_ = std::make_unique<kernels::Rope>(hp_.rope);
    if (hp_.rope_local) rope_local_ = std::make_unique<kernels::Rope>(*hp_.rope_local);
    if (hp_.rope_long) rope_long_ = std::make_unique<kernels::Rope>(*hp_.rope_long);
}

const float* KvRows::as_kept(DType type, const float* row, int64_t dim, float* dst) {
    if (type == DType::F32) return row;
    for (int64_t c = 0; c < dim; ++c) dst[c] = f16_to_f32(f32_to_f16(row[c]));
    return dst;
}

int64_t ContiguousRows::position(int64_t row) const {
    return n_past_ + row;
}

KvTypes ContiguousRows::kv_types() const {
    return cache_.types();
}

void ContiguousRows::store(int il, int64_t row, const float* k, const float* v) {
    cache_.store(il, n_past_ + row, k, v);
}

void ContiguousRows::attend(int il, const kernels::AttentionShape& shape, const float* q,
                            float* out, backend::Backend& be) {
    if (shape.linear) {  // over its recurrent state: O(d^2) a decoded token
        k_page_ = cache_.k(il);
        v_page_ = cache_.v(il);
        kernels::PagedSequence seq{{&k_page_, &v_page_, cache_.n_ctx()}, q, out, n_rows_, n_past_};
        seq.linear = &cache_.linear_state(il);
        be.attention_paged(shape, {&seq, 1});
        return;
    }
    if (!cache_.ring(il)) {
        be.attention(shape, q, cache_.k(il), cache_.v(il), n_rows_, n_past_, out);
        return;
    }
    const kernels::PagedSequence seq{cache_.ring_view(il), q, out, n_rows_, n_past_};
    be.attention_paged(shape, {&seq, 1});  // the same bits as the contiguous cache
}

const float* ContiguousRows::conv_lag(int il, int64_t row, int lag, const float* a, int64_t dim,
                                      float* scratch) {
    if (row >= lag) return as_kept(cache_.types().conv(), a + (row - lag) * dim, dim, scratch);
    if (n_past_ + row < lag) return nullptr;
    cache_.load_conv(il, n_past_ + row - lag, scratch);
    return scratch;
}

void ContiguousRows::store_conv(int il, int64_t row, const float* a) {
    cache_.store_conv(il, n_past_ + row, a);
}

namespace {

// The profile's cost of products run as one step: each matrix's, summed.
profiler::Cost fused_cost(std::initializer_list<kernels::MatmulOutput> outs, int64_t T) {
    profiler::Cost c;
    for (const kernels::MatmulOutput& o : outs) {
        const profiler::Cost m = profiler::matmul_cost(o.w.type, o.w.n_in, o.w.n_out, T);
        c.flops += m.flops;
        c.bytes += m.bytes;
    }
    return c;
}

}  // namespace

Forward::Forward(const Model& model, int n_batch, int n_threads, int64_t n_ctx)
    : model_(model),
      rope_(model.rope(n_ctx)),
      rope_local_(model.rope_local()),
      cpu_(n_threads),
      n_batch_(n_batch) {
    const HParams& hp = model.hparams();
    SYSLM_CHECK(n_batch > 0, "batch size must be positive");
    const size_t T = static_cast<size_t>(n_batch);
    const size_t ff = static_cast<size_t>(std::max({hp.n_ff, hp.n_ff_exp, hp.n_ff_shexp}));
    backend::Backend& be = backend_;
    x_ = be.alloc(T * hp.n_embd);
    h_ = be.alloc(T * hp.n_embd);
    // q goes straight into attn_ (RoPE in place there), k into k_, v into v_; a fused QKV matrix
    // (gpt2) writes [q | k | v] rows into qkv_ instead, and v is read from there. The attention
    // output lands in ff_a_, free until the FFN.
    const auto& layers = model.weights().layers;
    const auto fused = [](const LayerWeights& l) { return l.wqkv.data != nullptr; };
    if (std::any_of(layers.begin(), layers.end(), fused))
        qkv_ = be.alloc(T * (hp.q_dim() + 2 * hp.kv_dim()));
    k_ = be.alloc(T * hp.kv_dim());
    if (!std::all_of(layers.begin(), layers.end(), fused)) v_ = be.alloc(T * hp.kv_dim());
    attn_ = be.alloc(T * hp.q_dim());
    ff_a_ = be.alloc(T * std::max<size_t>(ff, hp.q_dim()));
    ff_b_ = be.alloc(T * ff);
    ff_out_ = be.alloc(T * std::max<size_t>(hp.n_embd, hp.n_expert));
    if (rope_) rope_angles_ = be.alloc(T * rope_->angle_floats());
    if (rope_local_) rope_angles_local_ = be.alloc(T * rope_local_->angle_floats());
    if (hp.n_expert > 0) {
        const size_t E = static_cast<size_t>(hp.n_embd), F = static_cast<size_t>(hp.n_ff_exp);
        moe_probs_ = be.alloc(T * hp.n_expert);
        moe_in_ = be.alloc(T * E);
        moe_gate_ = be.alloc(T * F);
        moe_up_ = be.alloc(T * F);
        moe_out_ = be.alloc(T * E);
    }
}

Context::Context(const Model& model, int n_ctx, int n_threads, int n_batch, KvTypes kv_types,
                 bool rings)
    : model_(model),
      cache_(model.hparams(), n_ctx, kv_types, rings ? n_batch : 0),
      forward_(model, n_batch, n_threads, n_ctx) {}

void Context::truncate(int n) {
    SYSLM_CHECK(n >= 0 && n <= n_past_, "truncate: position ", n, " is outside 0..", n_past_);
    SYSLM_CHECK(n_past_ - n <= cache_.max_rollback(), "truncate: rolling back ", n_past_ - n,
                " positions; the windowed layers' KV rings keep ", cache_.max_rollback());
    n_past_ = n;
}

// Runs tokens at positions n_past().. in batches of n_batch; the output rows (width floats each)
// of every token when all_rows, else of the last one only, go to out.
void Context::run_batches(std::span<const int32_t> tokens, bool all_rows, float* out,
                          size_t width) {
    SYSLM_CHECK(!tokens.empty(), "forward: no tokens");
    SYSLM_CHECK(n_past_ + static_cast<int64_t>(tokens.size()) <= n_ctx(),
                "context is full: ", n_past_, " + ", tokens.size(),
                " tokens exceed the context size ", n_ctx());
    for (int32_t t : tokens)  // all checked before any is processed
        SYSLM_CHECK(t >= 0 && t < model_.hparams().n_vocab, "token id ", t,
                    " is outside the vocabulary (", model_.hparams().n_vocab, " tokens)");
    const size_t n_batch = static_cast<size_t>(forward_.n_batch());
    for (size_t start = 0; start < tokens.size(); start += n_batch) {
        const size_t n = std::min(tokens.size() - start, n_batch);
        const bool last = start + n == tokens.size();
        logit_rows_.clear();
        if (all_rows)
            for (size_t r = 0; r < n; ++r) logit_rows_.push_back(static_cast<int64_t>(r));
        else if (last)
            logit_rows_.push_back(static_cast<int64_t>(n) - 1);
        ContiguousRows rows(cache_, n_past_, static_cast<int64_t>(n));
        forward_.run(tokens.subspan(start, n), rows, logit_rows_,
                     all_rows ? out + start * width : out);
        n_past_ += static_cast<int>(n);
    }
}

std::span<const float> Context::forward(std::span<const int32_t> tokens, bool all_logits) {
    const size_t V = static_cast<size_t>(model_.hparams().n_vocab);
    logits_.resize(all_logits ? tokens.size() * V : V);
    run_batches(tokens, all_logits, logits_.data(), V);
    return logits_;
}

std::vector<float> Context::hidden_states(std::span<const int32_t> tokens) {
    const size_t E = static_cast<size_t>(model_.hparams().n_embd);
    std::vector<float> out(tokens.size() * E);
    forward_.set_output_hidden(true);
    struct Restore {
        Forward& f;
        ~Restore() { f.set_output_hidden(false); }
    } restore{forward_};
    run_batches(tokens, true, out.data(), E);
    return out;
}

std::span<const float> Context::residual_until(int end, std::span<const int32_t> tokens) {
    const size_t E = static_cast<size_t>(model_.hparams().n_embd);
    SYSLM_CHECK(end >= 0 && end <= model_.hparams().n_layer, "split at layer ", end,
                ": the model has ", model_.hparams().n_layer);
    logits_.resize(tokens.size() * E);
    forward_.set_end_layer(end);
    struct Restore {
        Forward& f;
        ~Restore() { f.set_end_layer(-1); }
    } restore{forward_};
    run_batches(tokens, true, logits_.data(), E);
    return {logits_.data(), tokens.size() * E};
}

std::span<const float> Context::forward_from(int first_layer, std::span<const float> residual) {
    const int64_t E = model_.hparams().n_embd;
    const int64_t T = static_cast<int64_t>(residual.size()) / E;
    SYSLM_CHECK(T > 0 && n_past_ + T <= n_ctx(), "context is full: ", n_past_, " + ", T,
                " rows exceed the context size ", n_ctx());
    const size_t V = static_cast<size_t>(model_.hparams().n_vocab);
    logits_.resize(static_cast<size_t>(T) * V);
    logit_rows_.clear();
    for (int64_t r = 0; r < T; ++r) logit_rows_.push_back(r);
    ContiguousRows rows(cache_, n_past_, T);
    forward_.run_from(first_layer, residual, rows, logit_rows_, logits_.data());
    n_past_ += static_cast<int>(T);
    return logits_;
}

void Forward::observe(int il, const char* what, const float* x, int64_t rows, int64_t n_in,
                      int expert) {
    if (!observer_) return;
    // A shared block's importance sums over every layer that uses it.
    observer_->observe(cat("blk.", model_.hparams().block_of(il), ".", what, ".weight"), expert, x,
                       rows, n_in);
}

void Forward::run(std::span<const int32_t> tokens, KvRows& rows,
                  std::span<const int64_t> logit_rows, float* logits) {
    const HParams& hp = model_.hparams();
    const Weights& w = model_.weights();
    const int64_t T = static_cast<int64_t>(tokens.size()), E = hp.n_embd;
    SYSLM_CHECK(T > 0 && T <= n_batch_, "forward: ", T, " rows for a batch of ", n_batch_);
    for (int32_t t : tokens)
        SYSLM_CHECK(t >= 0 && t < hp.n_vocab, "token id ", t, " is outside the vocabulary (",
                    hp.n_vocab, " tokens)");
    prepare_rows(rows, T);

    SYSLM_PROFILE_STEPS(prof);
    SYSLM_PROFILE_STEP(prof, "embedding", 0, T * (row_bytes(w.token_embd.type, E) + 4 * E));
    // Embedding rows are dequantized from whatever type the file stores them in.
    row_ids_.assign(tokens.begin(), tokens.end());
    backend_.embed_rows(w.token_embd.type, w.token_embd.data, E, row_ids_, x_.data(), false);
    if (hp.spec().embed_scale) {
        const backend::Backend::Range all{0, static_cast<size_t>(T * E)};
        backend_.scale(x_.data(), {&all, 1}, std::sqrt(static_cast<float>(E)));
    }
    if (w.position_embd.data)
        backend_.embed_rows(w.position_embd.type, w.position_embd.data, E, positions_, x_.data(),
                            true);
    if (!w.token_embd_norm.empty())  // in place: the norm reads each row before writing it
        backend_.norm(hp.spec().norm, x_.data(), x_.data(), T, E, w.token_embd_norm.data(),
                      w.token_embd_norm_b.empty() ? nullptr : w.token_embd_norm_b.data(),
                      hp.norm_eps);

    prof.end();  // the blocks profile themselves
    layers_and_output(0, T, logit_rows, logits);
}

void Forward::run_from(int first_layer, std::span<const float> residual, KvRows& rows,
                       std::span<const int64_t> logit_rows, float* logits) {
    const int64_t E = model_.hparams().n_embd;
    const int64_t T = static_cast<int64_t>(residual.size()) / E;
    SYSLM_CHECK(first_layer >= 0 && first_layer <= model_.hparams().n_layer, "forward: layer ",
                first_layer, " of a model of ", model_.hparams().n_layer);
    SYSLM_CHECK(T > 0 && T <= n_batch_ && residual.size() == static_cast<size_t>(T * E),
                "forward: ", residual.size(), " residual floats for rows of ", E, " in a batch of ",
                n_batch_);
    prepare_rows(rows, T);
    backend_.copy_rows(residual.data(), E, x_.data(), E, T, E);
    layers_and_output(first_layer, T, logit_rows, logits);
}

// The checks and per-call state that depend on the rows' positions: learned positions within
// the trained range, and every layer's RoPE angles (computed once per call: the trigonometry per
// layer was ~5% of a prefill).
void Forward::prepare_rows(KvRows& rows, int64_t T) {
    const HParams& hp = model_.hparams();
    if (hp.spec().position == PositionKind::Learned)
        for (int64_t t = 0; t < T; ++t)
            SYSLM_CHECK(rows.position(t) < hp.n_ctx_train, hp.arch_name,
                        " has learned positions for ", hp.n_ctx_train, " tokens; position ",
                        rows.position(t), " is beyond them");
    rows_ = &rows;
    positions_.resize(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) positions_[t] = rows.position(t);
    if (rope_) backend_.rope_angles(*rope_, positions_, rope_angles_.data());
    if (rope_local_) backend_.rope_angles(*rope_local_, positions_, rope_angles_local_.data());
}

// The layers from first_layer on over the T rows in x_, then the final norm and the output
// matrix for the rows in logit_rows.
void Forward::layers_and_output(int first_layer, int64_t T, std::span<const int64_t> logit_rows,
                                float* logits) {
    const HParams& hp = model_.hparams();
    const Weights& w = model_.weights();
    const int64_t E = hp.n_embd;
    const int end = end_layer_ >= 0 ? end_layer_ : hp.n_layer;
    for (int il = first_layer; il < end; ++il) {
        if (!skip_.empty() && skip_[static_cast<size_t>(il)]) continue;
        attention_block(il, T);
        if (hp.n_expert > 0)
            moe_block(il, T);
        else
            ffn_block(il, T);
        if (observer_) observer_->observe_residual(il, x_.data(), T, E);
    }
    rows_ = nullptr;
    const int64_t n_out = static_cast<int64_t>(logit_rows.size());
    if (n_out == 0) return;
    if (end_layer_ >= 0) {  // a split model's first half: the residual rows as they are
        backend_.gather_rows(x_.data(), logit_rows, E, logits);
        return;
    }
    SYSLM_PROFILE_STEPS(prof);

    // Only the rows whose logits are wanted go through the final norm and the output matrix:
    // in place when they are the batch's last rows, else gathered.
    const float* x = x_.data() + logit_rows[0] * E;
    if (logit_rows.back() - logit_rows.front() + 1 != n_out || logit_rows.back() != T - 1) {
        backend_.gather_rows(x_.data(), logit_rows, E, ff_out_.data());
        x = ff_out_.data();
    }
    SYSLM_PROFILE_STEP(prof, "output_norm", kernels::norm_flops(hp.spec().norm) * n_out * E,
                       8 * n_out * E);
    norm(x, h_.data(), n_out, w.output_norm, w.output_norm_b);
    if (output_hidden_) {
        backend_.copy_rows(h_.data(), E, logits, E, n_out, E);
        return;
    }
    if (observer_)
        observer_->observe(
            w.output.data == w.token_embd.data ? "token_embd.weight" : "output.weight", -1,
            h_.data(), n_out, E);
    SYSLM_PROFILE_MATMUL_STEP(prof, "output", w.output, n_out);
    backend_.matmul(w.output, h_.data(), n_out, logits);
    if (hp.final_softcap > 0) {
        SYSLM_PROFILE_STEP(prof, "logit_softcap", 30.0 * n_out * hp.n_vocab,
                           8.0 * n_out * hp.n_vocab);
        backend_.softcap(logits, n_out * hp.n_vocab, hp.final_softcap);
    }
}

// LoRA: y += s B (A x) for each use on the rows it applies to, for each of the outputs (targets
// that read the same input x: q, k and v; gate and up), in one pass of the row kernel: one
// hand-off to the pool, groups of rows sharing each load of an adapter. Prefill chunks take it
// too: with A and B of rank r in the caches, it ran a 640-token prompt's adapter at a quarter of
// the cost of two f32 GEMMs and an add per matrix (AMD EPYC Zen 5, r 16, 7 projections).
void Forward::apply_lora(int il, std::initializer_list<LoraOutput> outputs, const float* x,
                         int64_t rows) {
    if (loras_.empty()) return;
    lora_segments_.clear();
    lora_rows_.clear();
    // segments point into it: no reallocation
    lora_rows_.reserve(static_cast<size_t>(rows) * loras_.size() * outputs.size());
    int64_t n_in = 0;
    size_t dots = 0;
    for (const LoraOutput& out : outputs)
        for (const LoraUse& u : loras_) {
            const LoraAdapter::Pair* p = u.adapter->pair(il, out.target);
            if (!p) continue;
            n_in = p->n_in;
            const size_t first = lora_rows_.size();
            if (u.rows.empty())
                for (int64_t r = 0; r < rows; ++r) lora_rows_.push_back(r);
            for (int64_t r : u.rows) {
                SYSLM_CHECK(r >= 0 && r < rows, "LoRA: row ", r, " of a call of ", rows);
                lora_rows_.push_back(r);
            }
            const auto n = static_cast<int64_t>(lora_rows_.size() - first);
            if (n == 0) continue;
            lora_segments_.push_back({p->a.data(), p->bt.data(), p->type == DType::F16, p->r,
                                      u.scale * p->scale, lora_rows_.data() + first, n, out.y,
                                      p->n_out});
            dots += static_cast<size_t>(p->r * n);
        }
    lora_dots_.resize(dots);
    backend_.lora_update(x, n_in, lora_segments_, lora_dots_.data());
}

// The architecture's norm (ArchSpec::norm) of `rows` rows of the residual stream.
void Forward::norm(const float* x, float* out, int64_t rows, const Vector& w, const Vector& b) {
    const HParams& hp = model_.hparams();
    backend_.norm(hp.spec().norm, x, out, rows, hp.n_embd, w.data(), b.data(), hp.norm_eps);
}

// Q, K and V of the normed rows in h_: a fused matrix writes [q | k | v] rows into qkv_;
// separate ones write q into attn_ (where RoPE works), k into k_ and v into v_.
Forward::QkvRows Forward::project_qkv(int il, int64_t T, profiler::Steps& prof) {
    const HParams& hp = model_.hparams();
    const LayerWeights& l = model_.weights().layers[il];
    const int64_t E = hp.n_embd, QD = hp.q_dim(), KD = hp.kv_dim();
    auto bias = [](const Vector& b) { return b.empty() ? nullptr : b.data(); };
    if (l.wqkv.data) {
        observe(il, "attn_qkv", h_.data(), T, E);
        SYSLM_PROFILE_MATMUL_STEP(prof, "attn_qkv", l.wqkv, T);
        backend_.matmul(l.wqkv, h_.data(), T, qkv_.data(), bias(l.bqkv));
        apply_lora(il, {{LoraTarget::QKV, qkv_.data()}}, h_.data(), T);
        float* row = qkv_.data();
        return {row, row + QD, row + QD + KD, QD + 2 * KD, QD + 2 * KD};
    }
    // q, k and v read the same normed input: it is quantized once for the three.
    kernels::SharedActivations& hq = shared_input_;
    hq.reset(h_.data(), T, E);
    for (const char* what : {"attn_q", "attn_k", "attn_v"}) observe(il, what, h_.data(), T, E);
    const std::initializer_list<kernels::MatmulOutput> qkv = {{l.wq, attn_.data(), bias(l.bq)},
                                                              {l.wk, k_.data(), bias(l.bk)},
                                                              {l.wv, v_.data(), bias(l.bv)}};
    if (kernels::fused_matmuls(qkv, T)) {  // one step: one hand-off to the pool for the three
        SYSLM_PROFILE_STEP(prof, "attn_qkv", fused_cost(qkv, T).flops, fused_cost(qkv, T).bytes);
        backend_.matmul(qkv, hq);
    } else {
        SYSLM_PROFILE_MATMUL_STEP(prof, "attn_q", l.wq, T);
        backend_.matmul(l.wq, hq, attn_.data(), bias(l.bq));
        SYSLM_PROFILE_MATMUL_STEP(prof, "attn_k", l.wk, T);
        backend_.matmul(l.wk, hq, k_.data(), bias(l.bk));
        SYSLM_PROFILE_MATMUL_STEP(prof, "attn_v", l.wv, T);
        backend_.matmul(l.wv, hq, v_.data(), bias(l.bv));
    }
    apply_lora(
        il, {{LoraTarget::Q, attn_.data()}, {LoraTarget::K, k_.data()}, {LoraTarget::V, v_.data()}},
        h_.data(), T);
    return {attn_.data(), k_.data(), v_.data(), QD, KD};
}

// The attention norm's output in h_ becomes its causal depthwise convolution with the rows of
// the k - 1 positions before each (this call's, or those kept by earlier calls), in the order
// of kernels::causal_conv's sums; then every row is kept for the positions after it.
void Forward::conv_block(int il, int64_t T) {
    const HParams& hp = model_.hparams();
    const int k = hp.conv_kernel;
    const int64_t E = hp.n_embd;
    const float* w = model_.weights().layers[il].attn_conv.data();
    float* out = ff_out_.data();  // free until the FFN
    conv_lag_.resize(static_cast<size_t>(E));
    for (int64_t t = 0; t < T; ++t) {
        const float* a = h_.data() + t * E;
        float* o = out + t * E;
        for (int64_t c = 0; c < E; ++c) o[c] = w[c] * a[c];
        for (int j = 1; j < k; ++j) {
            const float* x = rows_->conv_lag(il, t, j, h_.data(), E, conv_lag_.data());
            if (!x) break;  // before position 0
            const float* wj = w + j * E;
            for (int64_t c = 0; c < E; ++c) o[c] += wj[c] * x[c];
        }
    }
    if (k > 1)
        for (int64_t t = 0; t < T; ++t) rows_->store_conv(il, t, h_.data() + t * E);
    std::copy_n(out, T * E, h_.data());
}

void Forward::attention_block(int il, int64_t T) {
    const HParams& hp = model_.hparams();
    const LayerWeights& l = model_.weights().layers[il];
    const int64_t E = hp.n_embd, QD = hp.q_dim(), KD = hp.kv_dim();
    auto bias = [](const Vector& b) { return b.empty() ? nullptr : b.data(); };

    SYSLM_PROFILE_STEPS(prof);
    SYSLM_PROFILE_STEP(prof, "attn_norm", kernels::norm_flops(hp.spec().norm) * T * E, 8 * T * E);
    norm(x_.data(), h_.data(), T, l.attn_norm, l.attn_norm_b);
    if (hp.conv_kernel > 0) {
        SYSLM_PROFILE_STEP(prof, "attn_conv", 2.0 * hp.conv_kernel * T * E,
                           4.0 * (2 + hp.conv_kernel) * T * E);
        conv_block(il, T);
    }

    const QkvRows p = project_qkv(il, T, prof);
    if (hp.spec().qk_norm) {  // per head, in place (the rows are separate q and k: not fused)
        const kernels::NormKind rms = kernels::NormKind::Rms;
        SYSLM_PROFILE_STEP(prof, "qk_norm", kernels::norm_flops(rms) * T * (QD + KD),
                           8 * T * (QD + KD));
        backend_.norm(rms, p.q, attn_.data(), T * hp.n_head, hp.head_dim, l.attn_q_norm.data(),
                      nullptr, hp.norm_eps);
        backend_.norm(rms, p.k, k_.data(), T * hp.n_head_kv, hp.head_dim, l.attn_k_norm.data(),
                      nullptr, hp.norm_eps);
    }
    const float *q = p.q, *k = p.k;
    float* v = p.v;
    const int64_t q_stride = p.q_stride, kv_stride = p.kv_stride;
    KvRows& rows = *rows_;
    // Bytes of one position's key and value rows in the cache.
    const double kv_row = static_cast<double>(rows.kv_types().row_bytes(KD));
    double visible = 0;  // positions attended, summed over rows (for the profile)
    kernels::AttentionShape shape = attention_shape(hp, il);
    for (int64_t t = 0; t < T; ++t) visible += kernels::attention_pairs(shape, 1, rows.position(t));
    SYSLM_PROFILE_STEP(prof, "rope_kv_store", 3 * T * (QD + KD),
                       T * (8.0 * QD + 8.0 * KD + kv_row));
    // RoPE on q and k (in place in attn_ and k_, gathered there first from a fused row), then k
    // and v into the cache, converted to its type.
    if (const kernels::Rope* rope = rope_of(il)) {
        const float* angles = rope == rope_ ? rope_angles_.data() : rope_angles_local_.data();
        backend_.rope_rows(*rope, angles, T, q, q_stride, attn_.data(), T, hp.n_head, hp.head_dim);
        backend_.rope_rows(*rope, angles, T, k, kv_stride, k_.data(), T, hp.n_head_kv, hp.head_dim);
    } else {
        backend_.copy_rows(q, q_stride, attn_.data(), QD, T, QD);
        backend_.copy_rows(k, kv_stride, k_.data(), KD, T, KD);
    }
    // The Hadamard-rotated cache: q . k is unchanged by the rotation of both, the output comes
    // back rotated (below).
    const bool rotate = rows.kv_types().hadamard && !shape.linear;
    if (rotate) {
        backend_.hadamard_heads(attn_.data(), T, QD, hp.n_head, hp.head_dim);
        backend_.hadamard_heads(k_.data(), T, KD, hp.n_head_kv, hp.head_dim);
        backend_.hadamard_heads(v, T, kv_stride, hp.n_head_kv, hp.head_dim);
    }
    for (int64_t t = 0; t < T; ++t) rows.store(il, t, k_.data() + t * KD, v + t * kv_stride);
    SYSLM_PROFILE_STEP(prof, "attention", 4.0 * QD * visible,
                       kv_row * (rows.position(T - 1) + 1) + 8.0 * QD * T);
    shape.k_type = rows.kv_types().k;
    shape.v_type = rows.kv_types().v;
    shape.bf16_products = (l.wqkv.data ? l.wqkv : l.wq).type != DType::F32;
    float* out = ff_a_.data();
    rows.attend(il, shape, attn_.data(), out, backend_);
    if (rotate) backend_.hadamard_heads(out, T, QD, hp.n_head, hp.head_dim);
    observe(il, "attn_output", out, T, QD);
    SYSLM_PROFILE_MATMUL_STEP(prof, "attn_out", l.wo, T);
    backend_.matmul(l.wo, out, T, h_.data(), bias(l.bo));
    apply_lora(il, {{LoraTarget::O, h_.data()}}, out, T);
    if (!l.post_attn_norm.empty()) {  // in place
        SYSLM_PROFILE_STEP(prof, "post_attn_norm", kernels::norm_flops(hp.spec().norm) * T * E,
                           8 * T * E);
        norm(h_.data(), h_.data(), T, l.post_attn_norm, {});
    }
    SYSLM_PROFILE_STEP(prof, "residual_add", T * E, 12 * T * E);
    backend_.add(x_.data(), h_.data(), T * E);
}

void Forward::ffn_block(int il, int64_t T) {
    const HParams& hp = model_.hparams();
    const LayerWeights& l = model_.weights().layers[il];
    const int64_t E = hp.n_embd, F = hp.n_ff;
    auto bias = [](const Vector& b) { return b.empty() ? nullptr : b.data(); };

    SYSLM_PROFILE_STEPS(prof);
    SYSLM_PROFILE_STEP(prof, "ffn_norm", kernels::norm_flops(hp.spec().norm) * T * E, 8 * T * E);
    norm(x_.data(), h_.data(), T, l.ffn_norm, l.ffn_norm_b);
    const kernels::FfnActivation act = hp.spec().ffn;
    if (kernels::ffn_gated(act)) {
        kernels::SharedActivations& hq = shared_input_;  // gate and up share it
        hq.reset(h_.data(), T, E);
        // A fused gate-up is one tensor (ffn_up) with one input.
        if (!hp.spec().fused_gate_up) observe(il, "ffn_gate", h_.data(), T, E);
        observe(il, "ffn_up", h_.data(), T, E);
        const std::initializer_list<kernels::MatmulOutput> gate_up = {{l.ffn_gate, ff_a_.data()},
                                                                      {l.ffn_up, ff_b_.data()}};
        if (kernels::fused_matmuls(gate_up, T)) {
            SYSLM_PROFILE_STEP(prof, "ffn_gate_up", fused_cost(gate_up, T).flops,
                               fused_cost(gate_up, T).bytes);
            backend_.matmul(gate_up, hq);
        } else {
            SYSLM_PROFILE_MATMUL_STEP(prof, "ffn_gate", l.ffn_gate, T);
            backend_.matmul(l.ffn_gate, hq, ff_a_.data());
            SYSLM_PROFILE_MATMUL_STEP(prof, "ffn_up", l.ffn_up, T);
            backend_.matmul(l.ffn_up, hq, ff_b_.data());
        }
        apply_lora(il, {{LoraTarget::Gate, ff_a_.data()}, {LoraTarget::Up, ff_b_.data()}},
                   h_.data(), T);
    } else {
        observe(il, "ffn_up", h_.data(), T, E);
        SYSLM_PROFILE_MATMUL_STEP(prof, "ffn_up", l.ffn_up, T);
        backend_.matmul(l.ffn_up, h_.data(), T, ff_a_.data(), bias(l.ffn_up_b));
        apply_lora(il, {{LoraTarget::Up, ff_a_.data()}}, h_.data(), T);
    }
    const bool beta = !l.ffn_act_beta.empty();  // a learned Swish-beta instead of SwiGLU's 1
    SYSLM_PROFILE_STEP(prof, beta ? "swish_beta" : kernels::ffn_activation_name(act),
                       (kernels::ffn_activation_flops(act) + beta) * T * F,
                       kernels::ffn_activation_bytes(act) * T * F);
    if (beta)
        backend_.swish_beta_glu(ff_a_.data(), ff_b_.data(), l.ffn_act_beta.data(), T, F);
    else
        backend_.ffn_activation(act, ff_a_.data(), ff_b_.data(), T * F);
    observe(il, "ffn_down", ff_a_.data(), T, F);
    SYSLM_PROFILE_MATMUL_STEP(prof, "ffn_down", l.ffn_down, T);
    backend_.matmul(l.ffn_down, ff_a_.data(), T, ff_out_.data(), bias(l.ffn_down_b));
    apply_lora(il, {{LoraTarget::Down, ff_out_.data()}}, ff_a_.data(), T);
    if (!l.post_ffn_norm.empty()) {  // in place
        SYSLM_PROFILE_STEP(prof, "post_ffn_norm", kernels::norm_flops(hp.spec().norm) * T * E,
                           8 * T * E);
        norm(ff_out_.data(), ff_out_.data(), T, l.post_ffn_norm, {});
    }
    SYSLM_PROFILE_STEP(prof, "residual_add", T * E, 12 * T * E);
    backend_.add(x_.data(), ff_out_.data(), T * E);
}

// Routed experts: each token picks its top-k experts by router probability; tokens are grouped
// per expert so every expert's weights are read once per batch, not once per token.
void Forward::moe_block(int il, int64_t T) {
    const HParams& hp = model_.hparams();
    const LayerWeights& l = model_.weights().layers[il];
    const int64_t E = hp.n_embd, F = hp.n_ff_exp, X = hp.n_expert, K = hp.n_expert_used;

    SYSLM_PROFILE_STEPS(prof);
    SYSLM_PROFILE_STEP(prof, "ffn_norm", kernels::norm_flops(hp.spec().norm) * T * E, 8 * T * E);
    norm(x_.data(), h_.data(), T, l.ffn_norm, l.ffn_norm_b);
    observe(il, "ffn_gate_inp", h_.data(), T, E);
    SYSLM_PROFILE_MATMUL_STEP(prof, "moe_routing", l.ffn_gate_inp, T);
    float* probs = moe_probs_.data();
    backend_.matmul(l.ffn_gate_inp, h_.data(), T, moe_probs_.data());

    // Per expert: the rows routed to it and their weights.
    auto& routed = moe_routed_;
    routed.resize(static_cast<size_t>(X));
    for (Routed& r : routed) {  // keeps capacity
        r.rows.clear();
        r.weights.clear();
    }
    auto& order = moe_order_;
    order.resize(static_cast<size_t>(X));
    moe_ids_.resize(static_cast<size_t>(K));
    moe_weights_.resize(static_cast<size_t>(K));
    kernels::MoeRouting routing = hp.moe_routing();
    const float model_p = routing.top_p;
    for (int64_t t = 0; t < T; ++t) {
        if (model_p > 0) {  // top-p routing: the row's sequence may have its own p
            const float p = rows_->expert_top_p(t);
            routing.top_p = p > 0 ? p : model_p;
        }
        const int64_t n = kernels::moe_route_row(probs + t * X, X, routing, order.data(),
                                                 moe_ids_.data(), moe_weights_.data());
        for (int64_t j = 0; j < n; ++j) {  // top-p: n of the K may be chosen
            routed[moe_ids_[j]].rows.push_back(t);
            routed[moe_ids_[j]].weights.push_back(moe_weights_[j]);
        }
    }

    float *in = moe_in_.data(), *gate = moe_gate_.data(), *up = moe_up_.data(),
          *out = moe_out_.data();  // gathered rows
    for (int64_t e = 0; e < X; ++e) {
        const Routed& r = routed[e];
        if (r.rows.empty()) continue;
        SYSLM_PROFILE_STEP(prof, "moe_gather", 0, 8 * static_cast<int64_t>(r.rows.size()) * E);
        const int64_t n = static_cast<int64_t>(r.rows.size());
        backend_.gather_rows(h_.data(), r.rows, E, in);
        observe(il, "ffn_gate_exps", in, n, E, static_cast<int>(e));
        observe(il, "ffn_up_exps", in, n, E, static_cast<int>(e));
        SYSLM_PROFILE_MATMUL_STEP(prof, "ffn_gate_exps", l.gate_exps.expert(e), n);
        backend_.matmul(l.gate_exps.expert(e), in, n, gate);
        SYSLM_PROFILE_MATMUL_STEP(prof, "ffn_up_exps", l.up_exps.expert(e), n);
        backend_.matmul(l.up_exps.expert(e), in, n, up);
        SYSLM_PROFILE_STEP(prof, "swiglu", 5 * n * F, 12 * n * F);
        backend_.ffn_activation(kernels::FfnActivation::SwiGLU, gate, up, n * F);
        observe(il, "ffn_down_exps", gate, n, F, static_cast<int>(e));
        SYSLM_PROFILE_MATMUL_STEP(prof, "ffn_down_exps", l.down_exps.expert(e), n);
        backend_.matmul(l.down_exps.expert(e), gate, n, out);
        SYSLM_PROFILE_STEP(prof, "moe_combine", 2 * n * E, 12 * n * E);
        backend_.scatter_add_rows(out, r.rows, r.weights, E, x_.data());
    }

    if (hp.n_ff_shexp > 0) {  // shared expert, scaled by its own sigmoid gate
        const int64_t S = hp.n_ff_shexp;
        observe(il, "ffn_gate_shexp", h_.data(), T, E);
        observe(il, "ffn_up_shexp", h_.data(), T, E);
        SYSLM_PROFILE_MATMUL_STEP(prof, "ffn_gate_shexp", l.ffn_gate_shexp, T);
        backend_.matmul(l.ffn_gate_shexp, h_.data(), T, ff_a_.data());
        SYSLM_PROFILE_MATMUL_STEP(prof, "ffn_up_shexp", l.ffn_up_shexp, T);
        backend_.matmul(l.ffn_up_shexp, h_.data(), T, ff_b_.data());
        SYSLM_PROFILE_STEP(prof, "swiglu", 5 * T * S, 12 * T * S);
        backend_.ffn_activation(kernels::FfnActivation::SwiGLU, ff_a_.data(), ff_b_.data(), T * S);
        observe(il, "ffn_down_shexp", ff_a_.data(), T, S);
        SYSLM_PROFILE_MATMUL_STEP(prof, "ffn_down_shexp", l.ffn_down_shexp, T);
        backend_.matmul(l.ffn_down_shexp, ff_a_.data(), T, ff_out_.data());
        SYSLM_PROFILE_STEP(prof, "shexp_gate_add", 4 * T * E, 8 * T * E);
        backend_.gated_add(h_.data(), l.ffn_gate_inp_shexp.data(), ff_out_.data(), T, E, x_.data());
    }
}

}  // namespace syslm::model
