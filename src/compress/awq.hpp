// AWQ-style activation-aware scaling (Lin et al., 2023), folded into the previous op so the
// output file is an ordinary GGUF of the same architecture that llama.cpp loads.
//
// For a group of weight matrices that read the same input x, every input column j is multiplied
// by s_j and the op producing x divides its output channel j by s_j: the network computes the
// same function, but columns carrying large activations now span more of each quantization
// block, so their weights are quantized more finely. s_j = imp_j^(alpha/2) / norm, with imp_j
// the mean squared activation of column j (the importance matrix) and norm = sqrt(max * min)
// of the unnormalised scales; alpha is searched on a grid per group and kept where it lowers the
// importance-weighted quantization error sum_j imp_j * (W_ij - Q(W s)_ij / s_j)^2 (a diagonal
// approximation of the output error E||W x - Q(W s) (x / s)||^2; AWQ itself uses the
// activations, the diagonal is what the importance matrix holds). The quantizer in the search
// is the one the file will use: the recipe's type, importance-weighted with imp_j / s_j^2.
//
// Groups per layer (RMSNorm architectures without fused QKV: llama, qwen2 and their kin):
//   attn_q/k/v      <- attn_norm (its weight divided by s)
//   ffn_gate/up     <- ffn_norm
//   ffn_down        <- rows of ffn_up (and its bias)
//   attn_output     <- rows of attn_v (and its bias); with GQA one s per KV channel
//   output          <- output_norm (only when the output is not tied to the embeddings)
// Other layouts (gpt2's LayerNorm with bias and fused QKV, MoE experts) are left unscaled.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "io/gguf.hpp"

namespace syslm::compress {

class ImportanceMatrix;

struct AwqGroup {
    std::string input;               // importance entry the group reads ("blk.0.attn_q.weight")
    std::vector<std::string> mats;   // matrices scaled by columns
    std::string folded_into;         // norm or matrix that absorbs 1/s
    double alpha = 0;                // chosen; 0 = unscaled
    double error_before = 0, error_after = 0;  // weighted error at alpha 0 and at alpha
};

struct AwqPlan {
    std::map<std::string, std::vector<float>> column_scale;  // matrix -> s (its n_in columns)
    std::map<std::string, std::vector<float>> row_scale;     // matrix -> 1/s (its rows)
    std::map<std::string, std::vector<float>> vector_scale;  // norm or bias -> 1/s
    std::vector<AwqGroup> groups;
    std::string skipped;  // why the model (or part of it) was not scaled, for the log
};

// The quantized type each matrix will get (the recipe's choice, see quantize_model.hpp).
using TypeOfTensor = std::function<DType(const io::GGUFTensor&)>;

// Searches alpha for every group the importance matrix covers. `alphas`: the grid (default
// 0, 0.1, ..., 1). Reads the matrices from the file (at most `search_rows` rows of each).
AwqPlan plan_awq(const io::GGUFFile& in, const ImportanceMatrix& im, const TypeOfTensor& type_of,
                 int threads, std::ostream* log, int search_rows = 256,
                 std::vector<double> alphas = {});

// SmoothQuant (Xiao et al., 2023) for W8A8: activation outliers migrate into the weights with
// s_j = max|X_j|^alpha / max_i |W_ij|^(1 - alpha) over the group's matrices, folded the same way:
// q/k/v after attn_norm, gate/up after ffn_norm, ffn_down after ffn_up's rows, output after
// output_norm; attn_output keeps its input (GQA would tie its scales across heads). Needs the
// importance matrix's per-column maxima (collected from calibration text).
AwqPlan plan_smoothquant(const io::GGUFFile& in, const ImportanceMatrix& im, double alpha);

}  // namespace syslm::compress
