#include "train/train_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/error.hpp"
#include "core/profiler.hpp"
#include "kernels/cpu/activations.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/backward.hpp"
#include "kernels/cpu/ffn_activation.hpp"
#include "kernels/cpu/linear_backward.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/norm.hpp"
#include "kernels/type_traits.hpp"
#include "model/weights.hpp"

namespace syslm::train {

namespace {

bool same_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i)
        if ((i < a.size() ? a[i] : 1) != (i < b.size() ? b[i] : 1)) return false;
    return true;
}

}  // namespace

Precision precision_mode(const std::string& name) {
    if (name == "f32") return Precision::F32;
    if (name == "bf16") return Precision::BF16;
    if (name == "f16") return Precision::F16;
    fail("precision '", name, "': expected f32, bf16 or f16");
}

namespace {

// Megatron's cut of a dense llama / qwen2 block over p ranks (TrainModel's constructor).
Slicer tensor_parallel_slicer(const model::HParams& hp, parallel::Communicator* tp) {
    if (!tp || tp->size() == 1) return {};
    const int64_t p = tp->size(), r = tp->rank();
    SYSLM_CHECK(!hp.spec().dense_unsplit_training && hp.n_expert == 0,
                "tensor parallelism: implemented for dense llama / mistral / qwen2 models, not ",
                hp.arch_name, hp.n_expert > 0 ? " with experts" : "");
    SYSLM_CHECK(hp.n_head % p == 0 && hp.n_head_kv % p == 0 && hp.n_ff % p == 0,
                "tensor parallelism: ", p, " ranks do not divide the ", hp.n_head, " heads, ",
                hp.n_head_kv, " KV heads and FFN width ", hp.n_ff);
    const int64_t QD = hp.q_dim(), KD = hp.kv_dim(), F = hp.n_ff;
    return [=](const std::string& name, const std::vector<int64_t>& ne) -> TensorSlice {
        auto cut = [&](int dim, int64_t n) { return TensorSlice{dim, r * n / p, (r + 1) * n / p}; };
        if (name.ends_with(".attn_q.weight")) return cut(1, QD);
        if (name.ends_with(".attn_k.weight") || name.ends_with(".attn_v.weight")) return cut(1, KD);
        if (name.ends_with(".attn_q.bias")) return cut(0, QD);
        if (name.ends_with(".attn_k.bias") || name.ends_with(".attn_v.bias")) return cut(0, KD);
        if (name.ends_with(".attn_output.weight")) return cut(0, QD);
        if (name.ends_with(".ffn_gate.weight") || name.ends_with(".ffn_up.weight"))
            return cut(1, F);
        if (name.ends_with(".ffn_down.weight")) return cut(0, F);
        if (name.ends_with(".ffn_act_beta.weight")) return cut(0, F);
        // Vocabulary parallel: the embedding's and the head's rows (tokens), when they divide.
        if ((name == "token_embd.weight" || name == "output.weight") && ne.size() == 2 &&
            ne[1] % p == 0)
            return cut(1, ne[1]);
        return {};
    };
}

// Pipeline stage [first, end): other stages' blocks, and the embeddings / head it does not run,
// are not loaded; within the stage, the tensor-parallel cut.
Slicer model_slicer(const model::HParams& hp, parallel::Communicator* tp, int first, int end) {
    const Slicer cut = tensor_parallel_slicer(hp, tp);
    if (first == 0 && end == hp.n_layer) return cut;
    SYSLM_CHECK(0 <= first && first < end && end <= hp.n_layer, "pipeline stage: blocks [", first,
                ", ", end, ") of ", hp.n_layer);
    return [=](const std::string& name, const std::vector<int64_t>& ne) -> TensorSlice {
        bool mine;
        if (name.rfind("blk.", 0) == 0) {
            const int il = std::stoi(name.substr(4));
            mine = il >= first && il < end;
        } else if (name == "token_embd.weight" || name == "position_embd.weight") {
            mine = first == 0;
        } else {  // output norm and head
            mine = end == hp.n_layer;
        }
        if (!mine) return {-1, 0, 0, true};
        return cut ? cut(name, ne) : TensorSlice{};
    };
}

int stage_end(const model::HParams& hp, TrainModel::Stage s) {
    return s.end < 0 ? hp.n_layer : s.end;
}

// LoRA training: the base tensors read in place, in the file's type (the products' matrices and
// the embedding); the rest become f32 copies.
bool frozen_in_place(const std::string& name, const std::vector<int64_t>& ne) {
    if (ne.size() != 2) return false;
    if (name == "token_embd.weight" || name == "output.weight") return true;
    int il = 0;
    model::LoraTarget t{};
    return model::lora_block_target(name, il, t);
}

}  // namespace

TrainModel::TrainModel(const io::GGUFFile& file, Recompute recompute,
                       parallel::Communicator* tensor_parallel, Stage stage, const LoraSpec* lora)
    : hp_(model::load_hparams(file)),
      params_(lora ? ParamStore{}
                   : ParamStore::from_gguf(file, model_slicer(hp_, tensor_parallel, stage.first,
                                                              stage_end(hp_, stage)))),
      recompute_(recompute) {
    stage_ = {stage.first, stage_end(hp_, stage)};
    if (lora) set_up_lora(file, *lora, tensor_parallel);
    if (stage_.first > 0 || stage_.end < hp_.n_layer) {
        SYSLM_CHECK(file.find_tensor("output.weight"), file.path(),
                    ": pipeline stages of a model whose head is tied to its embedding are not "
                    "implemented");
        SYSLM_CHECK(hp_.n_expert == 0 && !hp_.spec().dense_unsplit_training,
                    "pipeline parallelism: implemented for dense llama / mistral / qwen2 models");
        for (int il = stage_.first; il < stage_.end; ++il)
            SYSLM_CHECK(hp_.block_of(il) >= stage_.first, file.path(), ": layer ", il,
                        " shares block ", hp_.block_of(il),
                        ", which another pipeline stage holds; stages must not split a shared "
                        "block's layers");
    }
    if (tensor_parallel && tensor_parallel->size() > 1) {  // this rank's heads and channels
        tp_ = tensor_parallel;
        hp_.n_head /= tp_->size();
        hp_.n_head_kv /= tp_->size();
        hp_.n_ff /= tp_->size();
    }
    SYSLM_CHECK(hp_.n_ff_shexp == 0, file.path(),
                ": training models with shared experts (qwen2moe) is not implemented; routed "
                "experts (mixtral-style llama) are");
    SYSLM_CHECK(!(hp_.spec().post_norms && moe()), file.path(),
                ": post-norms with experts are not supported");
    SYSLM_CHECK(hp_.n_expert <= kMaxTrainedExperts, file.path(), ": ", hp_.n_expert,
                " experts per layer; training supports up to ", kMaxTrainedExperts);
    const io::GGUFTensor& embd = file.tensor("token_embd.weight");  // its shape: every stage
    SYSLM_CHECK(embd.ne.size() == 2, file.path(), ": token_embd.weight must be 2-D");
    hp_.n_vocab = static_cast<int>(embd.ne[1]);
    if (tp_) {  // the slicer cut the vocabulary when the ranks divide it
        const Param* e = params_.find("token_embd.weight");
        const Param* o = params_.find("output.weight");
        const Param* any = e ? e : o;
        vocab_parallel_ = any && any->slice_dim == 1;
        if (vocab_parallel_) {
            vocab_local_ = hp_.n_vocab / tp_->size();
            vocab_begin_ = static_cast<int64_t>(tp_->rank()) * vocab_local_;
        }
    }
    ffn_width_ = moe() ? hp_.n_expert_used * hp_.n_ff_exp : hp_.n_ff;

    // GPT-2 ties its output matrix to the embedding, but its GGUF stores it twice (llama.cpp's
    // gpt2 requires output.weight): two bit-identical copies are trained as the one tensor HF
    // trains, and written back twice.
    if (hp_.spec().stores_tied_head_twice && params_.find("output.weight") &&
        params_.find("token_embd.weight")) {
        const Param* o = params_.find("output.weight");
        const Param* t = params_.find("token_embd.weight");
        if (o->ne == t->ne && std::equal(params_.value(o->name), params_.value(o->name) + o->numel,
                                         params_.value(t->name)))
            params_.tie("output.weight", "token_embd.weight");
    }
    if (hp_.has_rope()) {
        model::load_rope_factors(file, hp_);
        rope_ = std::make_unique<kernels::Rope>(hp_.rope);
        active_rope_ = rope_.get();
        if (hp_.rope_long) rope_long_ = std::make_unique<kernels::Rope>(*hp_.rope_long);
        if (hp_.rope_local) rope_local_ = std::make_unique<kernels::Rope>(*hp_.rope_local);
    }
    bind_all();
}

// The adapter as params(), the frozen base beside it.
void TrainModel::set_up_lora(const io::GGUFFile& file, const LoraSpec& spec,
                             parallel::Communicator* tensor_parallel) {
    SYSLM_CHECK((!tensor_parallel || tensor_parallel->size() == 1) && stage_.first == 0 &&
                    stage_.end == hp_.n_layer,
                "train --lora: tensor and pipeline parallelism are not implemented with LoRA "
                "(data parallelism is)");
    SYSLM_CHECK(!moe() && !hp_.shares_blocks(), file.path(),
                ": train --lora is implemented for dense models without shared blocks");
    params_ = lora_params(file, spec, lora_alpha_);
    base_ =
        ParamStore::from_gguf(file, [](const std::string& name, const std::vector<int64_t>& ne) {
            return TensorSlice{-1, 0, 0, frozen_in_place(name, ne)};
        });
    size_t largest = 0;
    for (const io::GGUFTensor& t : file.tensors())
        if (frozen_in_place(t.name, t.ne)) {
            SYSLM_CHECK(kernels::has_type_traits(t.type), file.path(), ": tensor '", t.name,
                        "' has type ", dtype_name(t.type), ", which syslm cannot compute with");
            largest = std::max(largest, static_cast<size_t>(t.numel()));
        }
    dequant_.resize(largest);
    lora_file_ = &file;
}

// Layer p's FFN: routed experts, phi3's fused gate-up, or the dense gate / up / down (with a
// learned Swish beta, or biases).
void TrainModel::bind_ffn(const std::string& p, Layer& l) {
    const int64_t E = hp_.n_embd, F = hp_.n_ff, X = hp_.n_expert, FX = hp_.n_ff_exp;
    const model::ArchSpec& spec = hp_.spec();
    if (moe()) {
        l.router = bind(p + "ffn_gate_inp.weight", {E, X});
        l.gate_exps = bind(p + "ffn_gate_exps.weight", {E, FX, X});
        l.up_exps = bind(p + "ffn_up_exps.weight", {E, FX, X});
        l.down_exps = bind(p + "ffn_down_exps.weight", {FX, E, X});
    } else if (spec.fused_gate_up) {  // one tensor: the gate's rows, then up's (phi3)
        const Tensor both = bind(p + "ffn_up.weight", {E, 2 * F});
        SYSLM_CHECK(both.lora < 0, "train --lora: LoRA on a fused gate-up tensor (", p,
                    "ffn_up.weight) is not implemented");
        l.ffn_gate = both;
        l.ffn_up = both.frozen
                       ? Tensor{nullptr, nullptr, both.frozen + F * row_bytes(both.frozen_type, E),
                                both.frozen_type}
                       : Tensor{both.w + E * F, both.g + E * F};
        l.ffn_down = bind(p + "ffn_down.weight", {F, E});
    } else {
        if (kernels::ffn_gated(spec.ffn)) l.ffn_gate = bind(p + "ffn_gate.weight", {E, F});
        l.ffn_up = bind(p + "ffn_up.weight", {E, F});
        l.ffn_down = bind(p + "ffn_down.weight", {F, E});
        if (hp_.swish_beta) l.ffn_beta = bind(p + "ffn_act_beta.weight", {F});
        if (spec.linear_biases) {
            l.ffn_up_b = bind(p + "ffn_up.bias", {F});
            l.ffn_down_b = bind(p + "ffn_down.bias", {E});
        }
    }
}

// Every parameter pointer, from the store's current arrays (again after they grow).
void TrainModel::bind_all() {
    const int64_t E = hp_.n_embd, V = hp_.n_vocab, QD = hp_.q_dim(), KD = hp_.kv_dim();
    const model::ArchSpec& spec = hp_.spec();
    layers_.clear();
    lora_.clear();
    const int64_t VL = vocab_parallel_ ? vocab_local_ : V;  // this rank's tokens
    if (first_stage()) token_embd_ = bind("token_embd.weight", {E, VL});
    if (last_stage()) {
        output_norm_ = bind("output_norm.weight", {E});
        output_ = bind("output.weight", {E, VL}, false);
        if (!output_.present()) output_ = token_embd_;  // tied: both uses add into one gradient
    }
    if (kernels::norm_has_bias(spec.norm)) output_norm_b_ = bind("output_norm.bias", {E});
    if (spec.position == model::PositionKind::Learned)
        position_embd_ = bind("position_embd.weight", {E, hp_.n_ctx_train});
    if (spec.embed_norm && first_stage()) {
        embd_norm_ = bind("token_embd_norm.weight", {E});
        if (kernels::norm_has_bias(spec.norm)) embd_norm_b_ = bind("token_embd_norm.bias", {E});
    }
    for (int il = 0; il < hp_.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        Layer l;
        if (il < stage_.first || il >= stage_.end) {  // another pipeline stage's block
            layers_.push_back(l);
            continue;
        }
        if (hp_.block_of(il) != il) {  // a shared block: its uses add into one gradient
            layers_.push_back(layers_[static_cast<size_t>(hp_.block_of(il))]);
            continue;
        }
        l.attn_norm = bind(p + "attn_norm.weight", {E});
        l.ffn_norm = bind(p + "ffn_norm.weight", {E});
        if (hp_.conv_kernel > 0) l.attn_conv = bind(p + "attn_conv.weight", {E, hp_.conv_kernel});
        if (kernels::norm_has_bias(spec.norm)) {
            l.attn_norm_b = bind(p + "attn_norm.bias", {E});
            l.ffn_norm_b = bind(p + "ffn_norm.bias", {E});
        }
        l.wo = bind(p + "attn_output.weight", {QD, E});
        if (spec.linear_biases) l.bo = bind(p + "attn_output.bias", {E});
        if (spec.fused_qkv) {
            l.wqkv = bind(p + "attn_qkv.weight", {E, QD + 2 * KD});
            if (spec.linear_biases) l.bqkv = bind(p + "attn_qkv.bias", {QD + 2 * KD});
        } else {
            l.wq = bind(p + "attn_q.weight", {E, QD});
            l.wk = bind(p + "attn_k.weight", {E, KD});
            l.wv = bind(p + "attn_v.weight", {E, KD});
            l.bq = bind(p + "attn_q.bias", {QD}, spec.qkv_bias);
            l.bk = bind(p + "attn_k.bias", {KD}, spec.qkv_bias);
            l.bv = bind(p + "attn_v.bias", {KD}, spec.qkv_bias);
        }
        if (spec.qk_norm) {
            l.q_norm = bind(p + "attn_q_norm.weight", {hp_.head_dim});
            l.k_norm = bind(p + "attn_k_norm.weight", {hp_.head_dim});
        }
        if (spec.post_norms) {
            l.post_attn_norm = bind(p + "post_attention_norm.weight", {E});
            l.post_ffn_norm = bind(p + "post_ffw_norm.weight", {E});
        }
        bind_ffn(p, l);
        layers_.push_back(l);
    }
    for (size_t m = 0; m < hidden_layers_.size(); ++m)
        hidden_proj_[m] = bind(hidden_name(hidden_layers_[m]), {E, hidden_embd_});
    size_t pairs = 0;
    for (const Param& p : params_.params()) pairs += p.name.ends_with(".lora_a");
    SYSLM_CHECK(pairs == lora_.size(), "train --lora: ", pairs - lora_.size(),
                " of the adapter's pairs are on matrices this model does not train");
}

TrainModel::Tensor TrainModel::bind(const std::string& name, std::vector<int64_t> ne,
                                    bool required) {
    const Param* p = params_.find(name);
    if (!p && lora()) p = base_.find(name);
    const io::GGUFTensor* frozen = nullptr;
    if (!p && lora() && (frozen = lora_file_->find_tensor(name)))
        SYSLM_CHECK(frozen_in_place(name, frozen->ne), "training: tensor '", name,
                    "' is not loaded");
    if (!p && !frozen) {
        SYSLM_CHECK(!required, "training: the model has no tensor '", name, "'");
        return {};
    }
    SYSLM_CHECK(same_shape(p ? p->ne : frozen->ne, ne), "training: tensor '", name,
                "' has the wrong shape");
    if (p && params_.find(name)) return {params_.value(name), params_.grad(name)};
    if (p) return {base_.value(name), base_.grad(name)};  // frozen: its gradient is not used
    Tensor t{nullptr, nullptr, frozen->data, frozen->type};
    if (const Param* a = params_.find(name + ".lora_a")) {
        const Param* b = params_.find(name + ".lora_b");
        const int64_t r = a->ne[1];
        const float s =
            lora_alpha_ > 0 ? lora_alpha_ / static_cast<float>(r) : 1.0f;  // as model/lora
        lora_.push_back({{params_.value(a->name), params_.grad(a->name)},
                         {params_.value(b->name), params_.grad(b->name)},
                         r,
                         s});
        t.lora = static_cast<int>(lora_.size()) - 1;
    }
    return t;
}

std::string TrainModel::hidden_name(int il) {
    return "distill.hidden." + std::to_string(il) + ".weight";
}

void TrainModel::match_hidden(std::vector<int> layers, int teacher_embd, uint64_t seed) {
    SYSLM_CHECK(hidden_layers_.empty(), "training: hidden-state matching is set up already");
    SYSLM_CHECK(teacher_embd > 0, "training: the teacher's width must be positive");
    const int64_t E = hp_.n_embd;
    std::mt19937_64 rng(seed);
    // Each projection starts as a random map preserving the expected squared norm (Xavier-like):
    // N(0, 1/E) entries, so P h is on the scale of h from the first step.
    std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(E)));
    for (int il : layers) {
        SYSLM_CHECK(il >= 0 && il < hp_.n_layer, "training: no block ", il, " to match (",
                    hp_.n_layer, " blocks)");
        std::vector<float> init(static_cast<size_t>(E) * teacher_embd);
        for (float& v : init) v = normal(rng);
        params_.add(hidden_name(il), {E, teacher_embd}, init, /*auxiliary=*/true);
    }
    hidden_layers_ = std::move(layers);
    hidden_embd_ = teacher_embd;
    hidden_proj_.assign(hidden_layers_.size(), {});
    bind_all();
}

// Relative squared error of the projected residual, e_r = |P h_r - t_r|^2 / |t_r|^2 per row,
// weighted by weight / (rows x matched layers); its gradient (times loss_scale) goes to the
// projection's and, kept in d_hidden_ for the backward, to the residual.
double TrainModel::hidden_loss(size_t m, const float* teacher, float weight, int64_t R,
                               float loss_scale, backend::Backend& be) {
    const int64_t E = hp_.n_embd, D = hidden_embd_;
    float* y = hidden_y_.data();
    linear(hidden_proj_[m], {}, x_.data(), R, E, D, y, be);
    const double c = static_cast<double>(weight) / (static_cast<double>(R) * hidden_layers_.size());
    const double loss = be.hidden_state_loss(y, teacher, R, D, c, loss_scale);
    linear_backward(hidden_proj_[m], {}, x_.data(), y, R, E, D,
                    d_hidden_.data() + static_cast<int64_t>(m) * R * E, false, be);
    return c * loss;
}

void TrainModel::plan(int B, int T) {
    SYSLM_CHECK(B > 0 && T > 0, "training: batch ", B, " x ", T, " is empty");
    if (hp_.spec().position == model::PositionKind::Learned)
        SYSLM_CHECK(T <= hp_.n_ctx_train, "training: sequence length ", T,
                    " exceeds the model's learned positions (", hp_.n_ctx_train, ")");
    if (B == planned_B_ && T == planned_T_) return;
    // Every layer, forward and backward, rotates at these positions; sequences longer than
    // LongRoPE's original context take its long factors (as transformers does).
    if (rope_) active_rope_ = rope_long_ && T > hp_.rope_orig_ctx ? rope_long_.get() : rope_.get();
    const kernels::Rope* local = rope_local_.get();
    for (auto [r, angles] :
         {std::pair{active_rope_, &rope_angles_}, std::pair{local, &rope_angles_local_}}) {
        if (!r) continue;
        const int na = r->angle_floats();
        angles->resize(static_cast<size_t>(T) * na);
        for (int t = 0; t < T; ++t) r->angles(t, angles->data() + static_cast<size_t>(t) * na);
    }
    const size_t bytes = activation_bytes(B, T);
    arena_.release();
    std::byte* base = nullptr;
    try {
        base = arena_.allocate(bytes);
    } catch (const std::bad_alloc&) {
        fail("training: cannot allocate ", bytes >> 20, " MiB of activations for a batch of ", B,
             " x ", T, " tokens (try a smaller --batch, --seq or --recompute selective|full)");
    }
    saved_.assign(recompute_ == Recompute::Full ? 1 : static_cast<size_t>(hp_.n_layer), Saved{});
    inputs_.assign(recompute_ == Recompute::Full ? static_cast<size_t>(hp_.n_layer) : 0, {});
    lora_u_.assign(lora_.size(), {});
    ArenaLayout place(base);
    layout(B, T, place);
    arena_bytes_ = bytes;
    planned_B_ = B;
    planned_T_ = T;
}

size_t TrainModel::activation_bytes(int B, int T) {
    ArenaLayout measure;
    layout(B, T, measure);
    return measure.bytes();
}

void TrainModel::layout(int B, int T, ArenaLayout& a) {
    const size_t R = static_cast<size_t>(B) * T;
    const size_t E = hp_.n_embd, QD = hp_.q_dim(), KD = hp_.kv_dim(),
                 F = static_cast<size_t>(ffn_width_), V = hp_.n_vocab, H = hp_.n_head,
                 X = static_cast<size_t>(hp_.n_expert), K = static_cast<size_t>(hp_.n_expert_used);
    const size_t n_saved = recompute_ == Recompute::Full ? 1 : static_cast<size_t>(hp_.n_layer);
    Saved scratch;  // measuring: views go nowhere
    for (size_t i = 0; i < n_saved; ++i) {
        Saved& s = a.placing() ? saved_[i] : scratch;
        for (auto* v : {&s.x_in, &s.x_mid}) a.take(*v, R * E);
        if (recompute_ != Recompute::Selective)
            for (auto* v : {&s.a, &s.b}) a.take(*v, R * E);
        for (auto* v : {&s.q, &s.o}) a.take(*v, R * QD);
        for (auto* v : {&s.k, &s.v}) a.take(*v, R * KD);
        if (hp_.spec().qk_norm) {  // q and k before their norm
            a.take(s.q_raw, R * QD);
            a.take(s.k_raw, R * KD);
        }
        if (hp_.spec().post_norms) {
            a.take(s.attn_out, R * E);
            a.take(s.ffn_out, R * E);
        }
        if (hp_.conv_kernel > 0) a.take(s.conv, R * E);
        a.take(s.lse, R * H);
        for (auto* v : {&s.g, &s.u}) a.take(*v, R * F);
        if (recompute_ != Recompute::Selective) a.take(s.s, R * F);
        if (moe()) {
            a.take(s.router_p, R * X);
            a.take(s.router_lse, R);
            a.take(s.slot_w, R * K);
            a.take(s.eo, R * K * E);
            a.take(s.route_slot, R * K);
            a.take(s.slot_row, R * K);
            a.take(s.expert_begin, X + 1);
        }
    }
    if (recompute_ == Recompute::Full) {
        Buf<float> none;
        for (int il = 0; il < hp_.n_layer; ++il)
            a.take(a.placing() ? inputs_[static_cast<size_t>(il)] : none, R * E);
    }
    if (moe()) {
        a.take(moe_in_, R * K * E);
        a.take(moe_grad_, R * K * E);
        a.take(moe_dz_, R * X);
        a.take(moe_slot_dw_, R * K);
        a.take(moe_aux_grad_, X);
        a.take(moe_count_, static_cast<size_t>(hp_.n_layer) * X);
        a.take(moe_dropped_, static_cast<size_t>(hp_.n_layer));
        a.take(moe_psum_, static_cast<size_t>(hp_.n_layer) * X);
    }
    for (auto* v : {&x_, &x_final_, &xf_, &dx_, &d_mid_, &d_a_, &d_b_}) a.take(*v, R * E);
    a.take(logits_, R * V);
    for (auto* v : {&d_q_, &d_o_}) a.take(*v, R * QD);
    for (auto* v : {&d_k_, &d_v_}) a.take(*v, R * KD);
    for (auto* v : {&d_g_, &d_u_}) a.take(*v, R * F);
    a.take(d_s_, R * std::max(F, QD + 2 * KD));  // also GPT-2's fused dQKV
    a.take(tmp_, R * std::max({E, QD + 2 * KD, F}));
    if (recompute_ == Recompute::Selective) {
        a.take(sel_a_, R * E);
        a.take(sel_b_, R * E);
        a.take(sel_s_, R * F);
    }
    if (hp_.spec().embed_norm) a.take(x_embed_, R * E);
    if (hp_.final_softcap > 0) a.take(capped_, R * V);
    a.take(tokens_, R);
    if (!lora_.empty()) {  // each pair's A x, then scratch for the widest pair
        size_t r_max = 0, out_max = 0;
        Buf<float> none;
        for (size_t i = 0; i < lora_.size(); ++i) {
            const LoraPair& p = lora_[i];
            a.take(a.placing() ? lora_u_[i] : none, R * static_cast<size_t>(p.r));
            r_max = std::max(r_max, static_cast<size_t>(p.r));
        }
        for (const Param& p : params_.params())
            if (p.name.ends_with(".lora_b"))
                out_max = std::max(out_max, static_cast<size_t>(p.ne[1]));
        a.take(lora_us_, R * r_max);
        a.take(lora_gu_, R * r_max);
        a.take(lora_y_, R * out_max);
    }
}

void TrainModel::norm_forward(const float* x, float* out, const Tensor& w, const Tensor& b,
                              int64_t rows, backend::Backend& be) const {
    SYSLM_PROFILE_SCOPE("norm", kernels::norm_flops(hp_.spec().norm) * double(rows) * hp_.n_embd,
                        8.0 * rows * hp_.n_embd);
    be.norm(hp_.spec().norm, x, out, rows, hp_.n_embd, w.w, b.w, hp_.norm_eps);
}

void TrainModel::norm_backward(const float* x, const Tensor& w, const Tensor& b, const float* dy,
                               float* dx, int64_t rows, backend::Backend& be) const {
    SYSLM_PROFILE_SCOPE("norm_bwd", 16.0 * rows * hp_.n_embd, 12.0 * rows * hp_.n_embd);
    be.norm_backward(hp_.spec().norm, x, w.w, dy, dx, w.g, b.g, rows, hp_.n_embd, hp_.norm_eps);
}

void TrainModel::linear(const Tensor& w, const Tensor& b, const float* x, int64_t rows,
                        int64_t n_in, int64_t n_out, float* y, backend::Backend& be) {
    const float* wf = dense(w, n_in, n_out, be);
    kernels::Rounding r;
    {
        SYSLM_PROFILE_SCOPE("matmul", 2.0 * rows * n_in * n_out,
                            4.0 * (rows * (n_in + n_out) + n_in * n_out));
        be.linear(x, wf, b.w, rows, n_in, n_out, y, rounded(r));
    }
    if (w.lora >= 0) lora_forward(w.lora, x, rows, n_in, n_out, y, be);
}

void TrainModel::linear_backward(const Tensor& w, const Tensor& b, const float* x, const float* dy,
                                 int64_t rows, int64_t n_in, int64_t n_out, float* dx, bool add_dx,
                                 backend::Backend& be) {
    kernels::Rounding r;
    if (!w.frozen) {
        SYSLM_PROFILE_SCOPE("matmul_bwd_weight", 2.0 * rows * n_in * n_out,
                            4.0 * (rows * (n_in + n_out) + 2 * n_in * n_out));
        be.linear_backward_weight(dy, x, rows, n_in, n_out, w.g, b.g, rounded(r));
    }
    const float* wf = dense(w, n_in, n_out, be);
    {
        SYSLM_PROFILE_SCOPE("matmul_bwd_input", 2.0 * rows * n_in * n_out,
                            4.0 * (rows * (n_in + n_out) + n_in * n_out));
        be.linear_backward_input(dy, wf, rows, n_in, n_out, dx, add_dx, rounded(r));
    }
    if (w.lora >= 0) lora_backward(w.lora, x, dy, rows, n_in, n_out, dx, be);
}

const float* TrainModel::dense(const Tensor& w, int64_t n_in, int64_t n_out, backend::Backend& be) {
    if (!w.frozen) return w.w;
    SYSLM_PROFILE_SCOPE("dequantize", 2.0 * n_in * n_out,
                        static_cast<double>(row_bytes(w.frozen_type, n_in) + 4 * n_in) * n_out);
    const auto n = static_cast<size_t>(n_out);
    if (all_rows_.size() < n)
        for (auto i = static_cast<int64_t>(all_rows_.size()); i < n_out; ++i)
            all_rows_.push_back(i);
    be.embed_rows(w.frozen_type, w.frozen, n_in, {all_rows_.data(), n}, dequant_.data(), false);
    return dequant_.data();
}

// y += s B (A x): u = x A^T is kept for the backward; (s u) B^T goes through lora_y_.
void TrainModel::lora_forward(int pair, const float* x, int64_t rows, int64_t n_in, int64_t n_out,
                              float* y, backend::Backend& be) {
    const LoraPair& P = lora_[static_cast<size_t>(pair)];
    float* u = lora_u_[static_cast<size_t>(pair)].data();
    SYSLM_PROFILE_SCOPE("lora", 2.0 * rows * P.r * (n_in + n_out),
                        4.0 * (rows * (n_in + 2 * n_out) + P.r * (n_in + n_out)));
    kernels::Rounding r;
    be.linear(x, P.a.w, nullptr, rows, n_in, P.r, u, rounded(r));
    for (int64_t i = 0; i < rows * P.r; ++i) lora_us_[i] = P.scale * u[i];
    be.linear(lora_us_.data(), P.b.w, nullptr, rows, P.r, n_out, lora_y_.data(), rounded(r));
    be.add(y, lora_y_.data(), rows * n_out);
}

// With g = s dy B (rows x r): dA += g^T x, dB += dy^T (s u), dx += g A.
void TrainModel::lora_backward(int pair, const float* x, const float* dy, int64_t rows,
                               int64_t n_in, int64_t n_out, float* dx, backend::Backend& be) {
    const LoraPair& P = lora_[static_cast<size_t>(pair)];
    const float* u = lora_u_[static_cast<size_t>(pair)].data();
    SYSLM_PROFILE_SCOPE("lora_bwd", 4.0 * rows * P.r * (n_in + n_out),
                        4.0 * (2 * rows * (n_in + n_out) + 2 * P.r * (n_in + n_out)));
    kernels::Rounding r;
    float* g = lora_gu_.data();
    be.linear_backward_input(dy, P.b.w, rows, P.r, n_out, g, false, rounded(r));
    for (int64_t i = 0; i < rows * P.r; ++i) {
        g[i] *= P.scale;
        lora_us_[i] = P.scale * u[i];
    }
    be.linear_backward_weight(g, x, rows, n_in, P.r, P.a.g, nullptr, rounded(r));
    be.linear_backward_weight(dy, lora_us_.data(), rows, P.r, n_out, P.b.g, nullptr, rounded(r));
    be.linear_backward_input(g, P.a.w, rows, n_in, P.r, dx, true, rounded(r));
}

void TrainModel::activation(Saved& S, int64_t n, backend::Backend& be, const float* beta) {
    float* s = act_out(S);
    const bool gated = kernels::ffn_gated(hp_.spec().ffn);
    std::copy_n((gated ? S.g : S.u).data(), n, s);
    if (beta)
        be.swish_beta_glu(s, S.u.data(), beta, n / ffn_width_, ffn_width_);
    else
        be.ffn_activation(hp_.spec().ffn, s, S.u.data(), n);
}

void TrainModel::layer_forward(int il, int B, int T, backend::Backend& be) {
    const Layer& l = layers_[static_cast<size_t>(il)];
    Saved& S = saved(il);
    const int64_t R = static_cast<int64_t>(B) * T, E = hp_.n_embd, QD = hp_.q_dim(),
                  KD = hp_.kv_dim(), F = ffn_width_;

    std::copy_n(x_.data(), R * E, S.x_in.data());
    if (recompute_ == Recompute::Full) std::copy_n(x_.data(), R * E, inputs_[il].data());
    float* a = norm1_out(S);
    norm_forward(S.x_in.data(), a, l.attn_norm, l.attn_norm_b, R, be);
    if (hp_.conv_kernel > 0) {  // the projections read the convolution of the normed rows
        be.causal_conv(a, l.attn_conv.w, hp_.conv_kernel, B, T, E, S.conv.data());
        a = S.conv.data();
    }
    if (hp_.spec().fused_qkv) {
        const int64_t W = QD + 2 * KD;
        linear(l.wqkv, l.bqkv, a, R, E, W, tmp_.data(), be);
        be.copy_rows(tmp_.data(), W, S.q.data(), QD, R, QD);
        be.copy_rows(tmp_.data() + QD, W, S.k.data(), KD, R, KD);
        be.copy_rows(tmp_.data() + QD + KD, W, S.v.data(), KD, R, KD);
    } else {
        const bool qk_norm = hp_.spec().qk_norm;  // then q and k are normed into S.q, S.k
        linear(l.wq, l.bq, a, R, E, QD, (qk_norm ? S.q_raw : S.q).data(), be);
        linear(l.wk, l.bk, a, R, E, KD, (qk_norm ? S.k_raw : S.k).data(), be);
        linear(l.wv, l.bv, a, R, E, KD, S.v.data(), be);
        if (qk_norm) {
            const kernels::NormKind rms = kernels::NormKind::Rms;
            be.norm(rms, S.q_raw.data(), S.q.data(), R * hp_.n_head, hp_.head_dim, l.q_norm.w,
                    nullptr, hp_.norm_eps);
            be.norm(rms, S.k_raw.data(), S.k.data(), R * hp_.n_head_kv, hp_.head_dim, l.k_norm.w,
                    nullptr, hp_.norm_eps);
        }
    }
    if (const kernels::Rope* r = rope(il)) {
        be.rope_rows(*r, rope_angles(il), T, S.q.data(), QD, S.q.data(), R, hp_.n_head,
                     hp_.head_dim);
        be.rope_rows(*r, rope_angles(il), T, S.k.data(), KD, S.k.data(), R, hp_.n_head_kv,
                     hp_.head_dim);
    }
    const kernels::AttentionShape shape = model::attention_shape(hp_, il);
    {
        SYSLM_PROFILE_SCOPE("attention", 4.0 * B * model::attention_pairs(hp_, il, T) * QD,
                            4.0 * R * (2 * QD + 2 * KD));
        for (int b = 0; b < B; ++b) {
            const int64_t r0 = static_cast<int64_t>(b) * T;
            be.attention_lse(shape, S.q.data() + r0 * QD, S.k.data() + r0 * KD,
                             S.v.data() + r0 * KD, T, S.o.data() + r0 * QD,
                             S.lse.data() + r0 * hp_.n_head);
        }
    }
    // With a post-norm the output lands where the backward reads it, and is normed into tmp_.
    float* attn_out = l.post_attn_norm.w ? S.attn_out.data() : tmp_.data();
    linear(l.wo, l.bo, S.o.data(), R, QD, E, attn_out, be);
    tp_sum(attn_out, R * E);  // row parallel: every rank's heads' share
    if (l.post_attn_norm.w) norm_forward(attn_out, tmp_.data(), l.post_attn_norm, {}, R, be);
    be.add(x_.data(), tmp_.data(), R * E);  // x (still x_in) += attention
    std::copy_n(x_.data(), R * E, S.x_mid.data());

    float* b = norm2_out(S);
    norm_forward(S.x_mid.data(), b, l.ffn_norm, l.ffn_norm_b, R, be);
    if (moe()) {
        moe_forward(il, S, b, R, be);
    } else {
        if (kernels::ffn_gated(hp_.spec().ffn)) linear(l.ffn_gate, {}, b, R, E, F, S.g.data(), be);
        linear(l.ffn_up, l.ffn_up_b, b, R, E, F, S.u.data(), be);
        activation(S, R * F, be, l.ffn_beta.w);
        float* ffn_out = l.post_ffn_norm.w ? S.ffn_out.data() : tmp_.data();
        linear(l.ffn_down, l.ffn_down_b, act_out(S), R, F, E, ffn_out, be);
        tp_sum(ffn_out, R * E);
        if (l.post_ffn_norm.w) norm_forward(ffn_out, tmp_.data(), l.post_ffn_norm, {}, R, be);
    }
    be.add(x_.data(), tmp_.data(), R * E);  // x (still x_mid) += FFN
}

// The dense FFN's backward from dL/d(layer output) in dx_ to dL/d(its normed input) in d_b_.
void TrainModel::dense_ffn_backward(Layer& l, Saved& S, const float* b, int64_t R,
                                    backend::Backend& be) {
    const int64_t E = hp_.n_embd, F = ffn_width_;
    const float* d_down = dx_.data();  // the gradient of ffn_down's output
    if (l.post_ffn_norm.w) {  // through the post-norm, into d_b_ (free until gate/up write it)
        norm_backward(S.ffn_out.data(), l.post_ffn_norm, {}, dx_.data(), d_b_.data(), R, be);
        d_down = d_b_.data();
    }
    linear_backward(l.ffn_down, l.ffn_down_b, act_out(S), d_down, R, F, E, d_s_.data(), false, be);
    const bool gated = kernels::ffn_gated(hp_.spec().ffn);
    if (l.ffn_beta.w)
        be.swish_beta_glu_backward(S.g.data(), S.u.data(), l.ffn_beta.w, d_s_.data(), d_g_.data(),
                                   d_u_.data(), l.ffn_beta.g, R, F);
    else
        be.ffn_activation_backward(hp_.spec().ffn, (gated ? S.g : S.u).data(), S.u.data(),
                                   d_s_.data(), (gated ? d_g_ : d_u_).data(), d_u_.data(), R * F);
    if (gated) linear_backward(l.ffn_gate, {}, b, d_g_.data(), R, E, F, d_b_.data(), false, be);
    linear_backward(l.ffn_up, l.ffn_up_b, b, d_u_.data(), R, E, F, d_b_.data(), gated, be);
    tp_sum(d_b_.data(), R * E);  // column parallel: every rank's channels' share
}

// dx_ holds dL/d(layer output) on entry and dL/d(layer input) on return.
void TrainModel::layer_backward(int il, int B, int T, backend::Backend& be) {
    Layer& l = layers_[static_cast<size_t>(il)];
    const int64_t R = static_cast<int64_t>(B) * T, E = hp_.n_embd, QD = hp_.q_dim(),
                  KD = hp_.kv_dim(), F = ffn_width_;
    if (recompute_ == Recompute::Full) {  // rebuild this layer's intermediates from its input
        std::copy_n(inputs_[il].data(), R * E, x_.data());
        layer_forward(il, B, T, be);
    }
    Saved& S = saved(il);
    if (recompute_ == Recompute::Selective) {  // the intermediates the forward did not keep
        norm_forward(S.x_in.data(), norm1_out(S), l.attn_norm, l.attn_norm_b, R, be);
        norm_forward(S.x_mid.data(), norm2_out(S), l.ffn_norm, l.ffn_norm_b, R, be);
        // MoE: the slots the routing filled (fewer than R x K with top-p).
        activation(S, moe() ? S.expert_begin[hp_.n_expert] * hp_.n_ff_exp : R * F, be,
                   l.ffn_beta.w);
    }
    // The projections' input: the normed rows, or their convolution (conv hybrids).
    const float* a = hp_.conv_kernel > 0 ? S.conv.data() : norm1_out(S);
    const float* b = norm2_out(S);

    // FFN: out = x_mid + [post-norm](down(s)).
    if (moe())
        moe_backward(il, S, b, R, be);
    else
        dense_ffn_backward(l, S, b, R, be);
    norm_backward(S.x_mid.data(), l.ffn_norm, l.ffn_norm_b, d_b_.data(), d_mid_.data(), R, be);
    be.add(d_mid_.data(), dx_.data(), R * E);

    // Attention: x_mid = x_in + [post-norm](out(attention(rope(q), rope(k), v))).
    const float* d_out = d_mid_.data();
    if (l.post_attn_norm.w) {  // into d_a_, free until the QKV backward writes it
        norm_backward(S.attn_out.data(), l.post_attn_norm, {}, d_mid_.data(), d_a_.data(), R, be);
        d_out = d_a_.data();
    }
    linear_backward(l.wo, l.bo, S.o.data(), d_out, R, QD, E, d_o_.data(), false, be);
    const kernels::AttentionShape shape = model::attention_shape(hp_, il);
    {
        SYSLM_PROFILE_SCOPE("attention_bwd", 10.0 * B * model::attention_pairs(hp_, il, T) * QD,
                            4.0 * R * (4 * QD + 4 * KD));
        for (int b = 0; b < B; ++b) {
            const int64_t r0 = static_cast<int64_t>(b) * T;
            be.attention_backward(
                shape, S.q.data() + r0 * QD, S.k.data() + r0 * KD, S.v.data() + r0 * KD,
                S.o.data() + r0 * QD, S.lse.data() + r0 * hp_.n_head, d_o_.data() + r0 * QD, T,
                d_q_.data() + r0 * QD, d_k_.data() + r0 * KD, d_v_.data() + r0 * KD);
        }
    }
    if (const kernels::Rope* r = rope(il)) {
        be.rope_rows_backward(*r, rope_angles(il), T, d_q_.data(), R, hp_.n_head, hp_.head_dim);
        be.rope_rows_backward(*r, rope_angles(il), T, d_k_.data(), R, hp_.n_head_kv, hp_.head_dim);
    }
    if (hp_.spec().qk_norm) {  // in place: d of the normed q, k -> d of the projections
        // Under tensor parallelism a rank holds some of the heads: the shared norm weights'
        // gradient is its heads' share, summed over the group before it joins the accumulated one.
        const int64_t D = hp_.head_dim;
        const bool split = tp_ && tp_->size() > 1;
        if (split) qk_norm_grad_.assign(static_cast<size_t>(2 * D), 0.0f);
        float* gq = split ? qk_norm_grad_.data() : l.q_norm.g;
        float* gk = split ? qk_norm_grad_.data() + D : l.k_norm.g;
        const kernels::NormKind rms = kernels::NormKind::Rms;
        be.norm_backward(rms, S.q_raw.data(), l.q_norm.w, d_q_.data(), d_q_.data(), gq, nullptr,
                         R * hp_.n_head, D, hp_.norm_eps);
        be.norm_backward(rms, S.k_raw.data(), l.k_norm.w, d_k_.data(), d_k_.data(), gk, nullptr,
                         R * hp_.n_head_kv, D, hp_.norm_eps);
        if (split) {
            tp_sum(qk_norm_grad_.data(), 2 * D);
            if (l.q_norm.g) be.add(l.q_norm.g, gq, D);
            if (l.k_norm.g) be.add(l.k_norm.g, gk, D);
        }
    }
    if (hp_.spec().fused_qkv) {
        const int64_t W = QD + 2 * KD;
        const Buf<float>& dqkv = d_s_;  // free again, planned for R x W too
        be.copy_rows(d_q_.data(), QD, dqkv.data(), W, R, QD);
        be.copy_rows(d_k_.data(), KD, dqkv.data() + QD, W, R, KD);
        be.copy_rows(d_v_.data(), KD, dqkv.data() + QD + KD, W, R, KD);
        linear_backward(l.wqkv, l.bqkv, a, dqkv.data(), R, E, W, d_a_.data(), false, be);
    } else {
        linear_backward(l.wq, l.bq, a, d_q_.data(), R, E, QD, d_a_.data(), false, be);
        linear_backward(l.wk, l.bk, a, d_k_.data(), R, E, KD, d_a_.data(), true, be);
        linear_backward(l.wv, l.bv, a, d_v_.data(), R, E, KD, d_a_.data(), true, be);
    }
    tp_sum(d_a_.data(), R * E);
    const float* d_normed = d_a_.data();
    if (hp_.conv_kernel > 0) {  // through the convolution, into d_b_ (free since the FFN's)
        be.causal_conv_backward(norm1_out(S), l.attn_conv.w, d_a_.data(), hp_.conv_kernel, B, T, E,
                                d_b_.data(), l.attn_conv.g);
        d_normed = d_b_.data();
    }
    norm_backward(S.x_in.data(), l.attn_norm, l.attn_norm_b, d_normed, dx_.data(), R, be);
    be.add(dx_.data(), d_mid_.data(), R * E);
}

// x_ from the tokens' embedding rows (and GPT-2's positions), or the previous stage's output.
void TrainModel::embed(std::span<const int32_t> tokens, int T, const StageIO* io,
                       backend::Backend& be) {
    const int64_t R = static_cast<int64_t>(tokens.size()), E = hp_.n_embd;
    if (first_stage() && vocab_parallel_) {  // this rank's tokens' rows, summed over the group
        be.embed_rows_range(token_embd_.w, E, tokens.data(), R, vocab_begin_, vocab_local_,
                            x_.data());
        tp_sum(x_.data(), R * E);
        if (hp_.spec().embed_scale) scale_embeddings(x_.data(), R * E, be);
    } else if (first_stage()) {
        // With a norm of the embeddings the rows go to x_embed_ (kept for the backward) first.
        float* rows = embd_norm_.w ? x_embed_.data() : x_.data();
        row_ids_.assign(tokens.begin(), tokens.end());
        if (token_embd_.frozen)
            be.embed_rows(token_embd_.frozen_type, token_embd_.frozen, E, row_ids_, rows, false);
        else
            be.embed_rows(DType::F32, token_embd_.w, E, row_ids_, rows, false);
        if (hp_.spec().embed_scale) scale_embeddings(rows, R * E, be);
        if (position_embd_.w) {  // row r is at position r % T
            for (int64_t r = 0; r < R; ++r) row_ids_[r] = r % T;
            be.embed_rows(DType::F32, position_embd_.w, E, row_ids_, rows, true);
        }
        if (embd_norm_.w) norm_forward(rows, x_.data(), embd_norm_, embd_norm_b_, R, be);
    } else {
        std::copy_n(io->x_in, R * E, x_.data());
    }
}

// Gemma's embedding rows times sqrt(n_embd) (in float, as transformers computes them).
void TrainModel::scale_embeddings(float* x, int64_t n, backend::Backend& be) const {
    const backend::Backend::Range all{0, static_cast<size_t>(n)};
    be.scale(x, {&all, 1}, std::sqrt(static_cast<float>(hp_.n_embd)));
}

// dx_ (the gradient of the first layer's input) into the embeddings, or back to the previous
// stage.
void TrainModel::embed_backward(int64_t R, int T, const StageIO* io, backend::Backend& be) {
    if (lora()) return;  // nothing below the first block is trained
    const int64_t E = hp_.n_embd;
    if (first_stage() && hp_.spec().embed_scale)  // the rows were scaled: so is their gradient
        scale_embeddings(dx_.data(), R * E, be);
    if (first_stage() && vocab_parallel_) {
        be.embedding_backward_range(tokens_.data(), R, dx_.data(), token_embd_.g, vocab_begin_,
                                    vocab_local_, E);
    } else if (first_stage()) {
        // With a norm of the embeddings, the gradient of the rows before it (in d_a_, free now).
        const float* d_rows = dx_.data();
        if (embd_norm_.w) {
            norm_backward(x_embed_.data(), embd_norm_, embd_norm_b_, dx_.data(), d_a_.data(), R,
                          be);
            d_rows = d_a_.data();
        }
        be.embedding_backward(tokens_.data(), R, d_rows, token_embd_.g, hp_.n_vocab, E);
        if (position_embd_.g) {  // row r is at position r % T
            row_ids_.resize(static_cast<size_t>(R));
            for (int64_t r = 0; r < R; ++r) row_ids_[r] = r % T;
            ones_.assign(static_cast<size_t>(R), 1.0f);
            be.scatter_add_rows(d_rows, row_ids_, ones_, E, position_embd_.g);
        }
    } else {
        std::copy_n(dx_.data(), R * E, io->dx);
    }
}

// The final norm, the output matrix and the loss; logits_ then holds dL/dlogits.
double TrainModel::head_loss(std::span<const int32_t> targets, int64_t R, float loss_scale,
                             const Distill* distill, backend::Backend& be) {
    const int64_t E = hp_.n_embd, V = hp_.n_vocab;
    std::copy_n(x_.data(), R * E, x_final_.data());
    norm_forward(x_final_.data(), xf_.data(), output_norm_, output_norm_b_, R, be);
    const int64_t VL = vocab_parallel_ ? vocab_local_ : V;
    linear(output_, {}, xf_.data(), R, E, VL, logits_.data(), be);
    if (hp_.final_softcap > 0) {  // the loss overwrites the logits: keep them for the backward
        be.softcap(logits_.data(), R * VL, hp_.final_softcap);
        std::copy_n(logits_.data(), R * VL, capped_.data());
    }
    SYSLM_PROFILE_SCOPE("cross_entropy", 4.0 * R * VL, 8.0 * R * VL);
    SYSLM_CHECK(!(distill && vocab_parallel_),
                "distillation with a vocabulary-parallel head is not implemented");
    if (vocab_parallel_) return vocab_parallel_xent(targets.data(), R, loss_scale, be);
    if (distill && distill->topk_ids)
        return be.distill_loss_topk(logits_.data(), distill->topk_ids, distill->teacher_logits,
                                    distill->k, targets.data(), R, V, distill->alpha,
                                    distill->temperature, loss_scale);
    if (distill)
        return be.distill_loss(logits_.data(), distill->teacher_logits, targets.data(), R, V,
                               distill->alpha, distill->temperature, loss_scale);
    return be.cross_entropy(logits_.data(), targets.data(), R, V, loss_scale);
}

// From dL/dlogits (logits_) to dx_ at the last layer's output.
void TrainModel::head_backward(int64_t R, backend::Backend& be) {
    const int64_t E = hp_.n_embd, VL = vocab_parallel_ ? vocab_local_ : hp_.n_vocab;
    if (hp_.final_softcap > 0)
        be.softcap_backward(capped_.data(), logits_.data(), R * VL, hp_.final_softcap);
    linear_backward(output_, {}, xf_.data(), logits_.data(), R, E, VL, d_a_.data(), false, be);
    if (vocab_parallel_) tp_sum(d_a_.data(), R * E);  // every rank's tokens' share
    norm_backward(x_final_.data(), output_norm_, output_norm_b_, d_a_.data(), dx_.data(), R, be);
}

// The stage's layers backward from dx_ (with each distilled hidden state's gradient added at
// its layer), then the embeddings or the previous stage's gradient.
void TrainModel::stage_backward(int B, int T, bool hidden, const StageIO* io,
                                backend::Backend& be) {
    const int64_t R = static_cast<int64_t>(B) * T, E = hp_.n_embd;
    for (int il = stage_.end - 1; il >= stage_.first; --il) {
        if (const int m = hidden_slot(il); hidden && m >= 0)
            be.add(dx_.data(), d_hidden_.data() + m * R * E, R * E);
        layer_backward(il, B, T, be);
        if (grad_hook_) grad_hook_(il);
    }
    embed_backward(R, T, io, be);
    if (grad_hook_) grad_hook_(-1);
}

double TrainModel::run(std::span<const int32_t> tokens, std::span<const int32_t> targets, int B,
                       int T, backend::Backend& be, bool backward, float loss_scale,
                       const Distill* distill, const StageIO* io) {
    SYSLM_CHECK(io || (first_stage() && last_stage()),
                "training: a pipeline stage runs through stage_step");
    plan(B, T);
    const int64_t R = static_cast<int64_t>(B) * T, E = hp_.n_embd, V = hp_.n_vocab;
    SYSLM_CHECK(
        static_cast<int64_t>(tokens.size()) == R && static_cast<int64_t>(targets.size()) == R,
        "training: ", tokens.size(), " tokens and ", targets.size(), " targets for a ", B, " x ", T,
        " batch");
    for (int64_t r = 0; r < R; ++r)
        SYSLM_CHECK(tokens[r] >= 0 && tokens[r] < V, "training: token ", tokens[r], " at ", r,
                    " is outside the vocabulary of ", V);
    std::copy(tokens.begin(), tokens.end(), tokens_.data());
    moe_z_sum_ = 0.0;
    z_grad_scale_ = loss_scale;
    embed(tokens, T, io, be);

    const bool hidden = backward && distill && distill->teacher_hidden && !hidden_layers_.empty();
    if (hidden) {  // sized once per (B, T): nothing allocated once warm
        hidden_y_.resize(static_cast<size_t>(R * hidden_embd_));
        d_hidden_.resize(static_cast<size_t>(R * E) * hidden_layers_.size());
    }
    double hidden_sum = 0;
    for (int il = stage_.first; il < stage_.end; ++il) {
        layer_forward(il, B, T, be);
        if (const int m = hidden_slot(il); hidden && m >= 0)
            hidden_sum +=
                hidden_loss(static_cast<size_t>(m), distill->teacher_hidden + m * R * hidden_embd_,
                            distill->hidden_weight, R, loss_scale, be);
    }
    if (!last_stage()) {  // the next stage's input; its gradient comes back as io->dy
        std::copy_n(x_.data(), R * E, io->x_out);
        if (!backward) return 0.0;
        std::copy_n(io->dy, R * E, dx_.data());
        stage_backward(B, T, false, io, be);
        return 0.0;
    }
    const double aux = moe() && backward ? moe_aux_loss(loss_scale) : 0.0;
    if (moe() && backward) record_routing();  // training steps only, not evaluation
    double loss = head_loss(targets, R, loss_scale, distill, be);
    if (!backward) return loss;
    loss += aux_coef_ * aux + hidden_sum + (moe() ? z_coef_ * moe_z_loss() : 0.0);
    head_backward(R, be);
    stage_backward(B, T, hidden, io, be);
    return loss;
}

double TrainModel::forward_backward(std::span<const int32_t> tokens,
                                    std::span<const int32_t> targets, int B, int T,
                                    backend::Backend& be, float loss_scale,
                                    const Distill* distill) {
    return run(tokens, targets, B, T, be, true, loss_scale, distill);
}

// The cross-entropy of softmax over the whole vocabulary when each rank holds the logits of its
// tokens (Megatron's vocabulary-parallel loss): the row maxima, the sums of exponentials and the
// target logits are combined over the group; each rank then writes the gradient of its logits.
double TrainModel::vocab_parallel_xent(const int32_t* targets, int64_t R, float scale,
                                       backend::Backend& be) {
    const int64_t VL = vocab_local_, V = hp_.n_vocab;
    xent_max_.resize(static_cast<size_t>(R));
    xent_sums_.resize(static_cast<size_t>(2 * R));
    int64_t counted = 0;
    for (int64_t r = 0; r < R; ++r) {
        SYSLM_CHECK(targets[r] < V, "cross-entropy: target ", targets[r], " of row ", r,
                    " is outside the vocabulary of ", V);
        counted += targets[r] >= 0;
    }
    be.row_max(logits_.data(), R, VL, xent_max_.data());
    tp_->all_reduce_max(xent_max_.data(), static_cast<size_t>(R));
    be.xent_sums(logits_.data(), targets, R, VL, vocab_begin_, xent_max_.data(), xent_sums_.data());
    tp_->all_reduce_sum(xent_sums_.data(), xent_sums_.size());
    const float inv = counted > 0 ? scale / static_cast<float>(counted) : 0.0f;
    const double loss = be.xent_gradient(logits_.data(), targets, R, VL, vocab_begin_,
                                         xent_max_.data(), xent_sums_.data(), inv);
    return counted > 0 ? loss / static_cast<double>(counted) : 0.0;
}

double TrainModel::stage_step(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                              int B, int T, backend::Backend& be, float loss_scale,
                              const StageIO& io) {
    return run(tokens, targets, B, T, be, io.backward, loss_scale, nullptr, &io);
}

double TrainModel::loss(std::span<const int32_t> tokens, std::span<const int32_t> targets, int B,
                        int T, backend::Backend& be) {
    return run(tokens, targets, B, T, be, false, 1.0f);
}

}  // namespace syslm::train
