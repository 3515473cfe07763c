// Whole-model quantization: GGUF in, GGUF out, tensor types chosen the way llama.cpp's
// llama-quantize chooses them by default (without an importance matrix), blocks bit-identical to
// ggml's reference quantizers (kernels/type_traits.hpp).
//
// Which tensors change (choose_tensor_type):
//   * only weight matrices: names ending in "weight" with 2 or more dimensions larger than 1
//     (experts' 3-D tensors included); norms, biases and other 1-D tensors are copied unchanged,
//     as are ffn_gate_inp (MoE router), position_embd, token_types and a few other small
//     matrices llama.cpp leaves alone;
//   * for a quantized target, output.weight (or token_embd.weight when the model ties its output
//     to the embeddings) becomes Q6_K — Q8_0 when the target is Q8_0, the architecture is falcon,
//     or its rows are not a multiple of the target's block; in models with 8 experts attn_v and
//     attn_k become Q8_0 (llama.cpp's only other target-independent rule);
//   * a row length that is not a multiple of the chosen type's block falls back as in llama.cpp:
//     Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0 (llama.cpp uses IQ4_NL, which
//     syslm does not have; Q4_0 is its 32-block stand-in of the same size, and what llama.cpp used
//     before IQ4_NL existed); if the row still does not fit, or the type has no fallback (legacy
//     types, where llama.cpp stops with an error), F16;
//   * a tensor already of the chosen type is copied as is; any other input type with kernels
//     (F32, F16, BF16, any quantized type) is dequantized to F32 first, so quantized models can
//     be requantized or expanded back to F16/F32.
//   * the K-quant recipes Q2_K, Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M mix types by tensor role and
//     layer as llama.cpp's do (use_more_bits: the first and last eighth of the layers and every
//     third one between): Q4_K_M/Q5_K_M give attn_v and ffn_down of those layers Q6_K and a
//     fused attn_qkv Q5_K / Q6_K; Q4_K_S gives attn_v of the first 4 layers and ffn_down of the
//     first eighth Q5_K; Q2_K gives attn_v Q3_K (Q4_K with 4+ query heads per KV head) and
//     ffn_down and attn_output Q3_K; Q3_K_M gives attn_v Q5_K in the first 2 layers and Q4_K
//     after, ffn_down Q5_K in the first sixteenth and Q4_K after, attn_output and attn_qkv Q4_K;
//     Q3_K_L gives attn_v, ffn_down and attn_output Q5_K; 8-expert models get attn_output Q5_K
//     under Q2_K, Q3_K_S/M and Q4_K_S/M; with an importance matrix, Q4_0/Q5_0 give ffn_down of
//     the first eighth of the layers Q4_1/Q5_1 (recipe_type in the .cpp has every rule).
//   * with an importance matrix (compress/imatrix.hpp), every tensor it has an entry for is
//     quantized by the weighted quantizer of its type (llama-quantize --imatrix, bit for bit).
// Metadata is copied, general.file_type set to llama.cpp's LLAMA_FTYPE for the target and
// general.quantization_version to 2; split keys are dropped (the output is one file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"

namespace syslm::compress {

// A K-quant recipe on top of the base type (Q4_K + KMix::M = llama.cpp's Q4_K_M). Q2_K is always
// llama.cpp's Q2_K mix; plain Q3_K, Q4_K and Q5_K are uniform (llama-quantize reads them as
// aliases of the _M mixes; syslm keeps the uniform file for measurements).
enum class KMix { None, S, M, L };

struct QuantTarget {
    DType type = DType::Q4_0;
    KMix mix = KMix::None;
    // W8A8: Q8_0 weights with one scale per row (per-channel int8), SmoothQuant-migrated, and a
    // static activation scale per matrix from calibration, written as metadata
    // (syslm.w8a8.tensors / syslm.w8a8.act_scales); llama.cpp runs the file as plain Q8_0.
    bool w8a8 = false;
};
// "Q4_0", "q4_k_m", "Q5_K_S", ...; nullopt for anything else.
std::optional<QuantTarget> parse_quant_target(std::string_view name);
std::string quant_target_name(const QuantTarget& t);
std::vector<std::string> quant_target_names();  // every accepted name

// The types `syslm quantize` can produce (all types with kernels except the activation-only
// partners Q8_1 and Q8_K).
bool is_quantize_target(DType t);
std::vector<DType> quantize_targets();

// llama.cpp's LLAMA_FTYPE value for a file whose weight matrices are mostly of type t.
// K-quants map to the uniform-ish variants: Q2_K -> MOSTLY_Q2_K, Q3_K -> Q3_K_S, Q4_K -> Q4_K_S,
// Q5_K -> Q5_K_S, Q6_K -> Q6_K.
uint32_t llama_ftype_of(DType t);
uint32_t llama_ftype_of(const QuantTarget& t);

// Facts about the model that the type rules need.
struct ModelFacts {
    std::string architecture;   // general.architecture
    bool has_output = false;    // output.weight exists (else token embeddings are tied)
    uint32_t expert_count = 0;  // <arch>.expert_count
    uint32_t n_layer = 0;       // <arch>.block_count
    uint32_t n_head = 0, n_head_kv = 0;  // attention heads (Q2_K's attn_v rule reads the ratio)
    bool has_imatrix = false;   // quantizing with an importance matrix (one rule depends on it)
};

// Whether a tensor is a weight matrix that quantization changes (llama-quantize's rule: names
// ending in "weight" with 2+ dimensions larger than 1, except norms, MoE routers and a few others).
bool is_quantizable_weight(std::string_view name, std::span<const int64_t> ne);

struct TypeChoice {
    DType type;
    bool quantize;     // false: copy the tensor unchanged
    bool fallback;     // the row length forced a different type than the rules asked for
    std::string note;  // why, for the log ("output tensor", "fallback: ...")
};

// The type a tensor gets when quantizing to `target` (see the rules above).
TypeChoice choose_tensor_type(std::string_view name, DType current, std::span<const int64_t> ne,
                              const QuantTarget& target, const ModelFacts& facts);

// Converts `rows` rows of n_per_row elements from type `from` to type `to` (dequantizing through
// F32), using up to `threads` std::threads over contiguous row ranges. Throws Error naming
// `what` and the row if a value is NaN or infinite (ggml's quantizers would write garbage).
// With `importance` (one vector of n_per_row per matrix of rows_per_matrix rows) and a target
// type that has a weighted quantizer, rows are quantized by it. col_scale (n_per_row) and
// row_scale (rows) multiply the values first (AWQ scaling, compress/awq.hpp).
void convert_rows(DType from, const void* src, DType to, void* dst, int64_t n_per_row, int64_t rows,
                  int threads, std::string_view what, std::span<const float> importance = {},
                  int64_t rows_per_matrix = 0, std::span<const float> col_scale = {},
                  std::span<const float> row_scale = {});

class ImportanceMatrix;
}  // namespace syslm::compress
namespace syslm::io {
struct GGUFTensor;
}  // namespace syslm::io
namespace syslm::compress {

// A type for the weight matrices whose names the pattern matches (ECMAScript regex, searched
// anywhere in the name, as llama-quantize's --tensor-type): "attn_v=q8_0",
// "blk\.(0|1)\.ffn_down=q6_k", or an exact name. The first matching rule wins over the
// recipe's choice; a type whose block does not divide the row is an error naming the tensor.
struct TensorTypeRule {
    std::string pattern;
    DType type;
};
// "PATTERN=TYPE"; throws Error saying what is wrong.
TensorTypeRule parse_tensor_type_rule(std::string_view text);

struct QuantizeOptions {
    QuantTarget target;
    std::vector<TensorTypeRule> tensor_types;  // overrides of the recipe, in order
    // Importance per input column for the tensors it has entries for (weighted quantizers); the
    // others, and types without a weighted quantizer (Q8_0, floats), are quantized as without.
    const ImportanceMatrix* imatrix = nullptr;
    // AWQ-style scaling searched on the importance matrix and folded into the previous ops
    // (compress/awq.hpp); needs imatrix.
    bool awq = false;
    std::vector<double> awq_alphas;  // the alpha grid searched; empty: 0, 0.1, ..., 1
    double smooth_alpha = 0.5;       // W8A8: SmoothQuant's migration strength; 0: none
    int threads = 0;              // <= 0: hardware concurrency
    std::ostream* log = nullptr;  // per-tensor lines and the summary; nullptr: silent
};

struct TensorResult {
    std::string name;
    DType from, to;
    std::vector<int64_t> ne;
    size_t bytes_before = 0, bytes_after = 0;
    bool converted = false;
    std::string note;
};

struct QuantizeResult {
    std::vector<TensorResult> tensors;
    size_t bytes_before = 0, bytes_after = 0;
    int n_converted = 0, n_fallback = 0;
};

// One tensor of a file converted to `to`, as quantize_model converts it (weighted by `imatrix`
// where it has the tensor and the type a weighted quantizer; no AWQ scaling): row_bytes(to,
// ne[0]) x rows bytes. Throws Error naming the tensor.
std::vector<uint8_t> convert_tensor(const io::GGUFTensor& t, DType to,
                                    const ImportanceMatrix* imatrix, int threads,
                                    std::string_view what);

// Reads `in_path` (validated GGUF), writes `out_path` atomically. Throws Error naming the file
// and tensor on any problem; `out_path` is then left untouched.
QuantizeResult quantize_model(const std::string& in_path, const std::string& out_path,
                              const QuantizeOptions& options);

}  // namespace syslm::compress
