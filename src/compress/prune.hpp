// Pruning of the transformer blocks' weight matrices (attn_q/k/v/output, attn_qkv, ffn_gate/up/
// down and the experts'), embeddings and the output matrix untouched.
//
// Unstructured: within every row (the weights of one output; or, with per_matrix, within the
// whole matrix, the classic layer-wise magnitude pruning), the lowest-scoring sparsity share of
// the weights become exactly zero; with an N:M pattern, the M - N lowest of every M consecutive
// weights of a row. Scores: magnitude |W_ij|, or Wanda |W_ij| * ||X_j|| (Sun et al. 2023) with
// ||X_j|| the root of the importance matrix's sum of squared activations of input column j.
//
// Structured: whole layers, attention heads (under GQA whole KV groups: a KV head with its query
// heads) and FFN channels are removed. Layers go greedily, one at a time, choosing the one whose
// absence raises the calibration loss least (the model run with that layer bypassed). Heads and
// channels go in the same number from every layer (GGUF hyper-parameters are per model), chosen
// per layer by the output energy they carry: for a head, sum over its columns c of attn_output
// of imp_c * ||W_o[:, c]||^2; for an FFN channel j, imp_j * ||W_down[:, j]||^2. The output is a
// smaller model of the same architecture (block_count, head_count, head_count_kv,
// feed_forward_length and key/value_length rewritten, layers renumbered) that computes exactly
// what the original computes with those parts zeroed (mask_only writes that masked original: a
// removed layer's attn_output and ffn_down zeroed, so it adds nothing to the residual).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace syslm::compress {

class ImportanceMatrix;

enum class PruneScore { Magnitude, Wanda };

struct PruneOptions {
    // Unstructured
    PruneScore score = PruneScore::Wanda;
    double sparsity = 0.5;  // fraction of each row set to zero (ignored with a pattern)
    bool per_matrix = false;  // compare scores across the whole matrix instead of per row
    int pattern_n = 0, pattern_m = 0;  // N:M (e.g. 2:4 keeps 2 of every 4); 0: none
    // Structured (fractions to remove; 0: none)
    double heads = 0, ffn = 0;
    int layers = 0;                     // whole layers to remove
    std::vector<int32_t> calib_tokens;  // layer choice: calibration text, tokenized
    int32_t calib_bos = -1;
    int calib_ctx = 256, calib_chunks = 8;
    bool mask_only = false;  // structured: zero the removed parts instead of removing them
    const ImportanceMatrix* imatrix = nullptr;  // Wanda and structured scores need it
    int threads = 0;
    std::ostream* log = nullptr;
};

struct PruneResult {
    int64_t pruned_weights = 0, total_weights = 0;  // over the matrices pruned
    int64_t params_before = 0, params_after = 0;    // whole model
    int heads_before = 0, heads_after = 0, kv_heads_before = 0, kv_heads_after = 0;
    int ffn_before = 0, ffn_after = 0;
    std::vector<int> removed_layers;  // original indices, in the order they were chosen
    double sparsity() const {
        return total_weights ? static_cast<double>(pruned_weights) / total_weights : 0;
    }
};

// "layers=N,heads=F,ffn=F" (any subset; fractions in [0, 1)) into o's structured fields. Throws
// Error naming the item (`what` names the option in the message).
void parse_structured_spec(const std::string& spec, PruneOptions& o,
                           const std::string& what = "--structured");

// Reads a GGUF model with float weight matrices (F32/F16/BF16; quantize after pruning), writes
// the pruned model atomically. Throws an Error naming the file and tensor on any problem.
PruneResult prune_unstructured(const std::string& in_path, const std::string& out_path,
                               const PruneOptions& options);
PruneResult prune_structured(const std::string& in_path, const std::string& out_path,
                             const PruneOptions& options);

}  // namespace syslm::compress
