#include "tune/sensitivity.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <thread>

#include "compress/quantize_model.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"
#include "model/transformer.hpp"

namespace syslm::tune {
namespace {

// Row-wise log-softmax of logits (n_rows x n_vocab), in double for the KL's small differences.
std::vector<double> log_softmax(std::span<const float> logits, int64_t n_vocab) {
    std::vector<double> out(logits.size());
    for (size_t r = 0; r * n_vocab < logits.size(); ++r) {
        const float* x = logits.data() + r * n_vocab;
        double mx = x[0];
        for (int64_t j = 1; j < n_vocab; ++j) mx = std::max(mx, static_cast<double>(x[j]));
        double sum = 0;
        for (int64_t j = 0; j < n_vocab; ++j) sum += std::exp(x[j] - mx);
        const double lse = mx + std::log(sum);
        for (int64_t j = 0; j < n_vocab; ++j) out[r * n_vocab + j] = x[j] - lse;
    }
    return out;
}

double kl_rows(std::span<const double> ref_logp, std::span<const float> logits, int64_t n_vocab) {
    const std::vector<double> lq = log_softmax(logits, n_vocab);
    double total = 0;
    const size_t rows = lq.size() / n_vocab;
    for (size_t r = 0; r < rows; ++r) {
        double kl = 0;
        for (int64_t j = 0; j < n_vocab; ++j) {
            const double lp = ref_logp[r * n_vocab + j];
            kl += std::exp(lp) * (lp - lq[r * n_vocab + j]);
        }
        total += std::max(kl, 0.0);  // rounding can make a tiny KL negative
    }
    return rows ? total / rows : 0;
}

}  // namespace

double mean_kl(std::span<const float> ref_logits, std::span<const float> logits, int64_t n_vocab) {
    SYSLM_CHECK(n_vocab > 0 && ref_logits.size() == logits.size() &&
                    ref_logits.size() % static_cast<size_t>(n_vocab) == 0,
                "mean_kl: ", ref_logits.size(), " and ", logits.size(), " logits of ", n_vocab);
    const std::vector<double> lp = log_softmax(ref_logits, n_vocab);
    return kl_rows(lp, logits, n_vocab);
}

std::vector<TensorSensitivity> measure_sensitivity(const std::string& model_path,
                                                   std::span<const int32_t> calibration,
                                                   const SensitivityOptions& options) {
    auto file = std::make_shared<const io::GGUFFile>(model_path);
    const model::Model reference(file);
    const int64_t n_vocab = reference.hparams().n_vocab;
    const int n_ctx = std::min(options.n_ctx, reference.hparams().n_ctx_train);
    SYSLM_CHECK(n_ctx > 1 && static_cast<int64_t>(calibration.size()) >= n_ctx, model_path,
                ": sensitivity needs at least one chunk of ", n_ctx, " calibration tokens, got ",
                calibration.size());
    int chunks = static_cast<int>(calibration.size() / static_cast<size_t>(n_ctx));
    if (options.max_chunks > 0) chunks = std::min(chunks, options.max_chunks);
    const int threads = options.threads > 0
                            ? options.threads
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

    // Each model runs the chunks from an empty cache; the reference's log-probabilities once.
    auto run = [&](const model::Model& m, auto&& per_chunk) {
        model::Context ctx(m, n_ctx, threads, n_ctx, DType::F32);
        for (int c = 0; c < chunks; ++c) {
            ctx.reset();
            per_chunk(c, ctx.forward(calibration.subspan(static_cast<size_t>(c) * n_ctx, n_ctx),
                                     /*all_logits=*/true));
        }
    };
    std::vector<std::vector<double>> ref_logp(static_cast<size_t>(chunks));
    run(reference, [&](int c, std::span<const float> logits) {
        ref_logp[static_cast<size_t>(c)] = log_softmax(logits, n_vocab);
    });

    std::vector<TensorSensitivity> out;
    for (const io::GGUFTensor& t : file->tensors()) {
        if (!compress::is_quantizable_weight(t.name, t.ne)) continue;
        TensorSensitivity s{t.name, t.ne, t.type, t.nbytes, {}};
        for (DType q : options.types)
            if (t.ne[0] % dtype_info(q).block_size == 0)
                s.options.push_back({q, row_bytes(q, t.ne[0]) * static_cast<uint64_t>(t.rows()), 0});
        out.push_back(std::move(s));
    }
    size_t total = 0, done = 0;
    for (const TensorSensitivity& s : out) total += s.options.size();
    for (TensorSensitivity& s : out) {
        const io::GGUFTensor& t = file->tensor(s.name);
        for (TypeCost& o : s.options) {
            if (o.type != t.type) {
                auto bytes = std::make_shared<const std::vector<uint8_t>>(compress::convert_tensor(
                    t, o.type, options.imatrix, threads, cat(model_path, ": tensor ", t.name)));
                const model::Model m(file, {{t.name, o.type, bytes}});
                double sum = 0;
                run(m, [&](int c, std::span<const float> logits) {
                    sum += kl_rows(ref_logp[static_cast<size_t>(c)], logits, n_vocab);
                });
                o.kl = sum / chunks;
            }
            if (options.progress) options.progress(++done, total);
        }
    }
    return out;
}

}  // namespace syslm::tune
