// Importance matrices for activation-aware quantization, as llama.cpp's llama-imatrix computes
// them: for every weight matrix, the sum over calibration tokens of each input column's squared
// activation, and the number of tokens. Their ratio (the mean square) is the importance the
// weighted quantizers (kernels/type_traits.hpp imatrix_quantizer) give each column's error:
// columns that carry large activations are quantized more accurately.
//
// Files: llama.cpp's GGUF imatrix format is written and read (general.type = "imatrix"; per
// matrix a tensor "<name>.in_sum2" of [n_in, n_mat] sums and "<name>.counts" of [1, n_mat] token
// counts; n_mat is the expert count of a 3-D expert tensor, else 1; keys imatrix.datasets,
// imatrix.chunk_count, imatrix.chunk_size). llama.cpp's older binary .dat format is read too.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "model/transformer.hpp"

namespace syslm::compress {

class ImportanceMatrix {
public:
    struct Entry {
        int64_t n_in = 0;             // columns of each matrix
        std::vector<double> sum_sq;   // n_mat * n_in sums of squared activations
        std::vector<double> count;    // n_mat token counts
        std::vector<float> max_abs;   // n_mat * n_in largest |activation| (collected, not saved:
                                      // W8A8's activation scales need calibration text)
        int64_t n_mat() const { return static_cast<int64_t>(count.size()); }
    };

    // Adds `rows` rows of n_in activations entering matrix `mat` (an expert index, or 0) of
    // `tensor`, which has n_mat matrices. Throws if the shape contradicts earlier calls.
    void add(const std::string& tensor, int64_t mat, int64_t n_mat, const float* x, int64_t rows,
             int64_t n_in);

    // The importance of each column of matrix `mat` of `tensor` (mean squared activation), or
    // empty when the tensor is unknown, has no tokens for that matrix, or n_in differs.
    std::vector<float> importance(const std::string& tensor, int64_t mat, int64_t n_in) const;

    // Adds a whole entry (loaders, tests); throws if the name is taken.
    void insert(const std::string& tensor, Entry e);

    const std::map<std::string, Entry>& entries() const { return entries_; }
    bool empty() const { return entries_.empty(); }

    std::vector<std::string> datasets;  // calibration sources (file names)
    int64_t chunk_count = 0, chunk_size = 0;

    void save(const std::string& path) const;  // GGUF imatrix, written atomically
    // A GGUF imatrix or a legacy .dat; throws an Error naming the file and what is wrong.
    static ImportanceMatrix load(const std::string& path);
    // Whether the file starts like one of the two formats (so a text file is not mistaken).
    static bool looks_like_imatrix(const std::string& path);

private:
    std::map<std::string, Entry> entries_;
};

// Feeds the forward's matrix inputs into an ImportanceMatrix.
class ImatrixCollector final : public model::ActivationObserver {
public:
    ImatrixCollector(ImportanceMatrix& m, int64_t n_expert) : m_(m), n_expert_(n_expert) {}
    void observe(const std::string& tensor, int expert, const float* x, int64_t rows,
                 int64_t n_in) override;

private:
    ImportanceMatrix& m_;
    int64_t n_expert_;
};

struct ImatrixOptions {
    int n_ctx = 512;       // tokens per chunk (each chunk starts a fresh context)
    int max_chunks = -1;   // < 0: every whole chunk of the text
    int threads = 0;       // <= 0: all cores
    std::ostream* log = nullptr;  // progress lines
};

// Runs the model over the tokens chunk by chunk (the first token of each chunk replaced by BOS
// when bos >= 0, as llama-imatrix does) and collects every matrix input. Throws if the text has
// fewer tokens than one chunk.
ImportanceMatrix collect_imatrix(const model::Model& model, std::span<const int32_t> tokens,
                                 int32_t bos, const ImatrixOptions& options);

// Same from a text file, tokenized with the model's own tokenizer; records the file as dataset.
ImportanceMatrix collect_imatrix_from_text(const model::Model& model, const std::string& text_path,
                                           const ImatrixOptions& options);

// An imatrix file (GGUF or legacy, see looks_like_imatrix) is loaded; anything else is taken as
// calibration text and the model at model_path is run over it.
ImportanceMatrix load_or_collect_imatrix(const std::string& model_path, const std::string& file,
                                         const ImatrixOptions& options);

}  // namespace syslm::compress
