// The tensors of a model, bound by llama.cpp's tensor names and checked against the
// hyper-parameters. Vectors (norms, biases, rope factors) are small and converted to float32
// once at load. Matrices (any weight type) are copied at load into one anonymous buffer on
// transparent huge pages, converted on the way where their type has a faster load-time layout
// (kernels/repack.hpp: Q4_0 -> Q4_0_G8, Q8_0 -> Q8_0_G8W), and their pages of the file released
// as they go, so the resident size stays that of the file: decode streams every weight once per
// token, and huge pages spare it the TLB misses of 4 KiB ones. Where huge pages cannot be had or
// memory is short, only the repacked matrices are copied and the rest stay zero-copy views of the
// mapped file (SYSLM_WEIGHTS=mmap always, =copy always; SYSLM_REPACK=0 keeps every matrix as
// stored). The token embedding is always read from the file, and so is the output matrix when it
// is tied to it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/gguf.hpp"
#include "kernels/cpu/matmul.hpp"
#include "model/hparams.hpp"

namespace syslm::model {

using Matrix = kernels::WeightView;  // rows of n_in elements; data == nullptr when absent
using Vector = std::vector<float>;   // empty when absent

struct Experts {  // n_expert matrices stored as one 3-D tensor
    DType type;
    int64_t n_in, n_out, n_expert;
    const uint8_t* data = nullptr;
    Matrix expert(int64_t e) const;
};

struct LayerWeights {
    Vector attn_norm, attn_norm_b;
    Matrix wq{}, wk{}, wv{}, wqkv{};  // wqkv: fused (gpt2); otherwise wq/wk/wv
    Vector bq, bk, bv, bqkv;
    Vector attn_q_norm, attn_k_norm;  // qk_norm (qwen3): head_dim each
    Matrix wo{};
    Vector bo;
    Vector post_attn_norm, post_ffn_norm;  // post_norms (gemma): of the blocks' outputs
    Vector ffn_norm, ffn_norm_b;
    Matrix ffn_gate{}, ffn_up{}, ffn_down{};  // dense FFN (ffn_gate absent for gpt2)
    Vector ffn_up_b, ffn_down_b;
    Vector attn_conv;       // HParams::conv_kernel: k rows of n_embd taps (row j: lag j)
    Vector ffn_act_beta;    // HParams::swish_beta: the gate's Swish beta per channel (n_ff)
    Matrix ffn_gate_inp{};  // MoE router
    Experts gate_exps{}, up_exps{}, down_exps{};  // routed experts
    Vector ffn_gate_inp_shexp;                    // qwen2moe shared-expert gate (n_embd)
    Matrix ffn_gate_shexp{}, ffn_up_shexp{}, ffn_down_shexp{};
};

struct Weights {
    Matrix token_embd{};
    Matrix position_embd{};                     // gpt2
    Vector token_embd_norm, token_embd_norm_b;  // bloom: a norm of the embedding rows
    Vector output_norm, output_norm_b;
    Matrix output{};  // equals token_embd when the embeddings are tied
    Vector rope_freqs;
    std::vector<LayerWeights> layers;
    std::shared_ptr<const void> copy;  // the huge-page buffer matrices point into, if any
    size_t copy_bytes = 0;
};

// A tensor of the file replaced in memory by the same values in another type (the tuner measures
// a model with one tensor quantized without writing a file). `bytes` holds the rows in `type`.
struct TensorOverride {
    std::string name;
    DType type;
    std::shared_ptr<const std::vector<uint8_t>> bytes;
};

// RoPE's frequency factors from the file's tensors into hp.rope (llama3's rope_freqs), or
// LongRoPE's short factors into hp.rope and the long ones into hp.rope_long (phi3).
void load_rope_factors(const io::GGUFFile& file, HParams& hp);

// Binds every tensor the architecture needs; a missing tensor, a wrong shape or an unsupported
// type throws an Error naming the file and the tensor. Also sets hp.n_vocab. An override
// replaces the file's tensor of its name (same shape; its size must match its type's rows).
Weights load_weights(const io::GGUFFile& file, HParams& hp,
                     const std::vector<TensorOverride>& overrides = {});

}  // namespace syslm::model
