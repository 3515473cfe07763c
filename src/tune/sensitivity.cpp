#include "tune/sensitivity.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>

#include "compress/imatrix.hpp"
#include "compress/quantize_model.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "io/gguf.hpp"
#include "kernels/type_traits.hpp"
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

// The residual stream after every block of each chunk the reference runs.
struct ResidualStreams : model::ActivationObserver {
    size_t chunk = 0;
    std::vector<std::vector<std::vector<float>>> after;  // [chunk][block]: rows x n_embd
    void observe(const std::string&, int, const float*, int64_t, int64_t) override {}
    void observe_residual(int il, const float* x, int64_t rows, int64_t n_embd) override {
        after.resize(std::max(after.size(), chunk + 1));
        auto& blocks = after[chunk];
        blocks.resize(std::max(blocks.size(), static_cast<size_t>(il) + 1));
        blocks[static_cast<size_t>(il)].assign(x, x + rows * n_embd);
    }
};

// The first layer whose computation reads the tensor: N for "blk.N.*", n_layer for the output
// matrix (only the final norm and the logits), 0 for anything else (the token embedding).
int first_layer_using(const std::string& name, int n_layer) {
    if (name == "output.weight") return n_layer;
    int layer = 0;
    if (std::sscanf(name.c_str(), "blk.%d.", &layer) == 1 && layer >= 0 && layer < n_layer)
        return layer;
    return 0;
}

// Rows between the ones whose quantization error the proxy mode measures.
constexpr int64_t kRowStride = 4;

// A view of every n-th row of a 2-D tensor (rows 0, n, 2n, ...), its bytes copied into `bytes`.
io::GGUFTensor every_nth_row(const io::GGUFTensor& t, int64_t n, std::vector<uint8_t>& bytes) {
    const size_t rb = row_bytes(t.type, t.ne[0]);
    const int64_t rows = (t.rows() + n - 1) / n;
    bytes.resize(rb * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
        std::memcpy(bytes.data() + rb * static_cast<size_t>(r), t.data + rb * static_cast<size_t>(r * n), rb);
    io::GGUFTensor s = t;
    s.ne = {t.ne[0], rows};
    s.nbytes = bytes.size();
    s.data = bytes.data();
    return s;
}

// The tensor as float rows (dequantized when it is stored quantized or as half floats).
std::vector<float> to_floats(const io::GGUFTensor& t) {
    std::vector<float> out(static_cast<size_t>(t.numel()));
    const kernels::TypeTraits& tt = kernels::type_traits(t.type);
    const size_t rb = row_bytes(t.type, t.ne[0]);
    for (int64_t r = 0; r < t.rows(); ++r)
        tt.to_float(t.data + static_cast<size_t>(r) * rb, out.data() + r * t.ne[0], t.ne[0]);
    return out;
}

}  // namespace

double weighted_error(std::span<const float> original, std::span<const uint8_t> quantized,
                      DType type, int64_t n_per_row, std::span<const float> importance) {
    SYSLM_CHECK(n_per_row > 0 && original.size() % static_cast<size_t>(n_per_row) == 0,
                "weighted_error: ", original.size(), " values in rows of ", n_per_row);
    SYSLM_CHECK(importance.empty() || importance.size() == static_cast<size_t>(n_per_row),
                "weighted_error: ", importance.size(), " importances for rows of ", n_per_row);
    const int64_t rows = static_cast<int64_t>(original.size()) / n_per_row;
    const size_t rb = row_bytes(type, n_per_row);
    SYSLM_CHECK(quantized.size() == rb * static_cast<size_t>(rows), "weighted_error: ",
                quantized.size(), " bytes for ", rows, " rows of ", dtype_name(type));
    const kernels::TypeTraits& tt = kernels::type_traits(type);
    std::vector<float> row(static_cast<size_t>(n_per_row));
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) {
        tt.to_float(quantized.data() + static_cast<size_t>(r) * rb, row.data(), n_per_row);
        const float* w = original.data() + r * n_per_row;
        for (int64_t j = 0; j < n_per_row; ++j) {
            const double d = static_cast<double>(w[j]) - row[j];
            total += (importance.empty() ? 1.0 : importance[j]) * d * d;
        }
    }
    return total;
}

double mean_kl(std::span<const float> ref_logits, std::span<const float> logits, int64_t n_vocab) {
    SYSLM_CHECK(n_vocab > 0 && ref_logits.size() == logits.size() &&
                    ref_logits.size() % static_cast<size_t>(n_vocab) == 0,
                "mean_kl: ", ref_logits.size(), " and ", logits.size(), " logits of ", n_vocab);
    const std::vector<double> lp = log_softmax(ref_logits, n_vocab);
    return kl_rows(lp, logits, n_vocab);
}

namespace {

// One sensitivity measurement: the reference's pass over the calibration chunks, kept, and the
// KL of models with one tensor replaced, run from where that tensor is first used.
class SensitivityRun {
public:
    SensitivityRun(const std::string& model_path, std::span<const int32_t> calibration,
                   const SensitivityOptions& options)
        : path_(model_path), calibration_(calibration), o_(options),
          file_(std::make_shared<const io::GGUFFile>(model_path)), reference_(file_),
          n_vocab_(reference_.hparams().n_vocab),
          n_ctx_(std::min(options.n_ctx, reference_.hparams().n_ctx_train)),
          threads_(ThreadPool::resolve(options.threads)) {
        SYSLM_CHECK(n_ctx_ > 1 && static_cast<int64_t>(calibration.size()) >= n_ctx_, model_path,
                    ": sensitivity needs at least one chunk of ", n_ctx_,
                    " calibration tokens, got ", calibration.size());
        chunks_ = static_cast<int>(calibration.size() / static_cast<size_t>(n_ctx_));
        if (options.max_chunks > 0) chunks_ = std::min(chunks_, options.max_chunks);
        run_reference();
    }

    // Every quantizable matrix with the types whose blocks fit its rows.
    std::vector<TensorSensitivity> candidates() const {
        std::vector<TensorSensitivity> out;
        for (const io::GGUFTensor& t : file_->tensors()) {
            if (!compress::is_quantizable_weight(t.name, t.ne)) continue;
            TensorSensitivity s{t.name, t.ne, t.type, t.nbytes, {}};
            for (DType q : o_.types)
                if (t.ne[0] % dtype_info(q).block_size == 0)
                    s.options.push_back(
                        {q, row_bytes(q, t.ne[0]) * static_cast<uint64_t>(t.rows()), 0});
            out.push_back(std::move(s));
        }
        return out;
    }

    // Every option of the tensor run (its own type: KL 0).
    void measure_every_type(TensorSensitivity& s, const std::function<void()>& tick) const {
        const io::GGUFTensor& t = file_->tensor(s.name);
        for (TypeCost& o : s.options) {
            if (o.type != t.type)
                o.kl = measure_kl(t, o.type, compress::convert_tensor(t, o.type, o_.imatrix,
                                                                      threads_, what(t)));
            tick();
        }
    }

    // Proxy: every option's weighted error, then one option run. The errors are estimated on
    // every kRowStride-th row of a 2-D matrix (rows are quantized independently, so the sum
    // over them, scaled by the stride, is an unbiased estimate); only the option run is
    // quantized whole. Quantizing every type whole was most of the phase's time on L1B.
    void measure_proxy(TensorSensitivity& s) const {
        const io::GGUFTensor& t = file_->tensor(s.name);
        const bool sampled = t.ne.size() == 2 && t.rows() >= 16 * kRowStride;
        std::vector<uint8_t> sample_bytes;
        const io::GGUFTensor sample = sampled ? every_nth_row(t, kRowStride, sample_bytes) : t;
        const double scale = static_cast<double>(t.rows()) / static_cast<double>(sample.rows());
        const std::vector<float> w = to_floats(sample);
        const std::vector<float> imp =
            o_.imatrix && t.ne.size() == 2 ? o_.imatrix->importance(t.name, 0, t.ne[0])
                                           : std::vector<float>{};
        std::vector<std::vector<uint8_t>> converted(s.options.size());
        std::vector<size_t> order;
        for (size_t i = 0; i < s.options.size(); ++i) {
            TypeCost& o = s.options[i];
            o.measured = o.type == t.type;  // the file's own type: KL 0, exactly
            if (o.type == t.type) continue;
            converted[i] = compress::convert_tensor(sample, o.type, o_.imatrix, threads_, what(t));
            o.weighted_error = scale * weighted_error(w, converted[i], o.type, t.ne[0], imp);
            order.push_back(i);
        }
        if (order.empty()) return;
        std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
            return s.options[a].weighted_error < s.options[b].weighted_error;
        });
        // The median-error option is run; the others are scaled from it by their errors.
        const size_t ref = order[order.size() / 2];
        TypeCost& r = s.options[ref];
        r.kl = measure_kl(t, r.type,
                          sampled ? compress::convert_tensor(t, r.type, o_.imatrix, threads_, what(t))
                                  : std::move(converted[ref]));
        r.measured = true;
        for (size_t i : order)
            if (i != ref)
                s.options[i].kl =
                    r.weighted_error > 0 ? r.kl * s.options[i].weighted_error / r.weighted_error : 0;
    }

private:
    std::span<const int32_t> chunk_tokens(int c) const {
        return calibration_.subspan(static_cast<size_t>(c) * n_ctx_, static_cast<size_t>(n_ctx_));
    }

    std::string what(const io::GGUFTensor& t) const { return cat(path_, ": tensor ", t.name); }

    // The reference runs each chunk once, from an empty cache: its log-probabilities and the
    // residual stream after every block are kept. A model with one tensor of layer l changed
    // runs from the stream entering l (Forward::run_from), skipping the layers it shares with
    // the reference: half of them on average, with the same logits as a whole forward.
    void run_reference() {
        ref_logp_.resize(static_cast<size_t>(chunks_));
        model::Context ctx(reference_, n_ctx_, threads_, n_ctx_, DType::F32);
        ctx.set_observer(&streams_);
        for (int c = 0; c < chunks_; ++c) {
            ctx.reset();
            streams_.chunk = static_cast<size_t>(c);
            ref_logp_[static_cast<size_t>(c)] =
                log_softmax(ctx.forward(chunk_tokens(c), true), n_vocab_);
        }
    }

    double measure_kl(const io::GGUFTensor& t, DType type, std::vector<uint8_t> converted) const {
        auto bytes = std::make_shared<const std::vector<uint8_t>>(std::move(converted));
        const model::Model m(file_, {{t.name, type, bytes}});
        const int layer = first_layer_using(t.name, reference_.hparams().n_layer);
        model::Context ctx(m, n_ctx_, threads_, n_ctx_, DType::F32);
        double sum = 0;
        for (int c = 0; c < chunks_; ++c) {
            ctx.reset();
            const std::span<const float> logits =
                layer == 0 ? ctx.forward(chunk_tokens(c), true)
                           : ctx.forward_from(layer, streams_.after[static_cast<size_t>(c)]
                                                                   [static_cast<size_t>(layer - 1)]);
            sum += kl_rows(ref_logp_[static_cast<size_t>(c)], logits, n_vocab_);
        }
        return sum / chunks_;
    }

    std::string path_;
    std::span<const int32_t> calibration_;
    const SensitivityOptions& o_;
    std::shared_ptr<const io::GGUFFile> file_;
    model::Model reference_;
    int64_t n_vocab_;
    int n_ctx_, threads_, chunks_ = 0;
    std::vector<std::vector<double>> ref_logp_;
    ResidualStreams streams_;
};

}  // namespace

std::vector<TensorSensitivity> measure_sensitivity(const std::string& model_path,
                                                   std::span<const int32_t> calibration,
                                                   const SensitivityOptions& options) {
    const SensitivityRun run(model_path, calibration, options);
    std::vector<TensorSensitivity> out = run.candidates();
    size_t total = 0, done = 0;
    for (const TensorSensitivity& s : out) total += options.proxy ? 1 : s.options.size();
    const auto tick = [&] {
        if (options.progress) options.progress(++done, total);
    };
    for (TensorSensitivity& s : out) {
        if (options.proxy) {
            run.measure_proxy(s);
            tick();
        } else {
            run.measure_every_type(s, tick);
        }
    }
    return out;
}

}  // namespace syslm::tune
