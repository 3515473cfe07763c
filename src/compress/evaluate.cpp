#include "compress/evaluate.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "core/error.hpp"
#include "core/html.hpp"
#include "core/mapped_file.hpp"
#include "infer/wire_rows.hpp"
#include "model/transformer.hpp"
#include "profile/bench_runner.hpp"
#include "tokenizer/tokenizer.hpp"

namespace syslm::compress {
namespace {

// log softmax of one row of logits, in double.
void log_softmax(std::span<const float> logits, std::vector<double>& out) {
    out.resize(logits.size());
    const float mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l - mx));
    const double lse = std::log(sum) + static_cast<double>(mx);
    for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - lse;
}

size_t argmax(std::span<const double> v) {
    return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

void describe_file(const model::Model& m, ModelEval& e) {
    e.file_bytes = m.file().file_size();
    std::map<std::string, uint64_t> by_type;
    for (const io::GGUFTensor& t : m.file().tensors()) {
        e.tensor_bytes += t.nbytes;
        e.n_params += t.numel();
        by_type[std::string(dtype_name(t.type))] += t.nbytes;
    }
    e.bits_per_weight =
        e.n_params ? 8.0 * static_cast<double>(e.tensor_bytes) / static_cast<double>(e.n_params)
                   : 0.0;
    std::vector<std::pair<uint64_t, std::string>> order;
    for (const auto& [type, bytes] : by_type) order.emplace_back(bytes, type);
    std::sort(order.rbegin(), order.rend());
    for (const auto& [bytes, type] : order) {
        const double share = 100.0 * static_cast<double>(bytes) /
                             static_cast<double>(std::max<uint64_t>(e.tensor_bytes, 1));
        if (share < 1.0) continue;
        char buf[48];
        std::snprintf(buf, sizeof buf, "%s%s %.0f%%", e.types.empty() ? "" : ", ", type.c_str(),
                      share);
        e.types += buf;
    }
}

struct Position {  // a scored position, for the cascade curve
    double confidence, kl;
    bool agree;
};

// The curve at shares 0, 0.1, ..., 1: the least confident positions deferred (ties in position
// order), see CascadePoint.
std::vector<CascadePoint> cascade_curve(std::vector<Position> pos, double top1, double kl_mean) {
    std::stable_sort(pos.begin(), pos.end(), [](const Position& a, const Position& b) {
        return a.confidence < b.confidence;
    });
    const size_t n = pos.size();
    std::vector<CascadePoint> curve;
    for (int i = 0; i <= 10 && n > 0; ++i) {
        const size_t k = (n * static_cast<size_t>(i) + 5) / 10;
        CascadePoint c;
        c.share = static_cast<double>(k) / static_cast<double>(n);
        c.threshold = k < n ? pos[k].confidence : 1.0;
        double agree = static_cast<double>(k), kl = 0;
        for (size_t j = k; j < n; ++j) {
            agree += pos[j].agree;
            kl += pos[j].kl;
        }
        c.agreement = agree / static_cast<double>(n);
        c.kl = kl / static_cast<double>(n);
        c.random_agreement = c.share + (1 - c.share) * top1;
        c.random_kl = (1 - c.share) * kl_mean;
        curve.push_back(c);
    }
    return curve;
}

struct Accumulator {
    double nll = 0, nll2 = 0, kl = 0, kl2 = 0;
    int64_t n = 0, agree = 0;
    std::vector<Position> positions;  // with the cascade curve only
    TextEval result() const {
        TextEval t;
        t.n_scored = static_cast<int>(n);
        const double dn = static_cast<double>(n);
        const double mean = nll / dn;
        t.ppl = std::exp(mean);
        const double var = nll2 / dn - mean * mean;
        t.ppl_stderr = var > 0 && n > 1 ? std::sqrt(var / (dn - 1)) * t.ppl : 0;
        t.kl = kl / dn;
        const double kvar = kl2 / dn - t.kl * t.kl;
        t.kl_stderr = kvar > 0 && n > 1 ? std::sqrt(kvar / (dn - 1)) : 0;
        t.top1 = static_cast<double>(agree) / dn;
        if (!positions.empty()) t.cascade = cascade_curve(positions, t.top1, t.kl);
        return t;
    }
};

}  // namespace

TextEval merge(const TextEval& a, const TextEval& b) {
    if (a.n_scored == 0) return b;
    if (b.n_scored == 0) return a;
    const double na = a.n_scored, nb = b.n_scored, n = na + nb;
    auto mean = [&](double x, double y) { return (na * x + nb * y) / n; };
    auto stderr_of = [&](double x, double y) {
        return std::sqrt(na * na * x * x + nb * nb * y * y) / n;
    };
    TextEval m;
    m.n_scored = a.n_scored + b.n_scored;
    m.ppl = std::exp(mean(std::log(a.ppl), std::log(b.ppl)));
    // ppl_stderr is the standard error of the mean NLL times the perplexity.
    m.ppl_stderr = stderr_of(a.ppl_stderr / a.ppl, b.ppl_stderr / b.ppl) * m.ppl;
    m.kl = mean(a.kl, b.kl);
    m.kl_stderr = stderr_of(a.kl_stderr, b.kl_stderr);
    m.top1 = mean(a.top1, b.top1);
    return m;
}

namespace {

using Models = std::vector<std::unique_ptr<model::Model>>;

// One evaluated configuration: a model with a KV cache type.
struct Entry {
    const model::Model* model;
    model::KvTypes kv;
    int split_at = -1;  // >= 0: run split there, the rows crossing as `wire` carries them
    infer::WireType wire = infer::WireType::F16;
    const model::Model* edge = nullptr;  // the split's first half (null: `model`)
};
using Entries = std::vector<Entry>;

// The models; every one must share the reference's vocabulary.
Models load_models(const std::vector<std::string>& paths) {
    Models models;
    for (const std::string& p : paths) models.push_back(std::make_unique<model::Model>(p));
    const int V = models[0]->hparams().n_vocab;
    for (size_t i = 1; i < models.size(); ++i)
        SYSLM_CHECK(models[i]->hparams().n_vocab == V, paths[i], ": vocabulary of ",
                    models[i]->hparams().n_vocab, " tokens, the reference ", paths[0], " has ", V,
                    " (KL divergence needs the same vocabulary)");
    return models;
}

// Every model with every cache type (model-major), described in the report.
Entries make_entries(const Models& models, const std::vector<std::string>& paths,
                     const EvalOptions& o, EvalReport& r, const model::Model* edge) {
    std::vector<model::KvTypes> types;
    for (const std::string& name : o.cache_types) types.push_back(model::kv_types_from_name(name));
    if (types.empty()) types.emplace_back();
    r.cache_types = types.size() > 1 || !(types[0] == model::KvTypes{});
    std::vector<infer::WireType> wires;
    for (const std::string& w : o.wires) wires.push_back(infer::wire_type(w));
    SYSLM_CHECK(o.split_at >= 0 || wires.empty(), "eval: wire formats need a split point");
    if (o.split_at >= 0 && wires.empty()) wires.push_back(infer::WireType::F16);
    Entries entries;
    for (size_t i = 0; i < models.size(); ++i)
        for (const model::KvTypes& kv : types) {
            const model::HParams& hp = models[i]->hparams();
            model::check_kv_types(hp, kv);
            SYSLM_CHECK(o.split_at <= hp.n_layer, "eval: split at layer ", o.split_at, ": ",
                        paths[i], " has ", hp.n_layer, " layers");
            ModelEval e;
            e.path = paths[i];
            e.cache_type = kv.name();
            e.kv_bytes_per_position =
                static_cast<double>(hp.n_layer) * static_cast<double>(kv.row_bytes(hp.kv_dim()));
            describe_file(*models[i], e);
            entries.push_back({models[i].get(), kv});
            r.models.push_back(e);
            for (infer::WireType w : wires) {
                entries.push_back({models[i].get(), kv, o.split_at, w, edge});
                e.split = std::to_string(o.split_at) + "/" + infer::wire_name(w);
                r.models.push_back(e);
            }
        }
    return entries;
}

// Scores chunks of a text with every entry: NLL of the next token, KL from the reference
// (entries[0]) and top-1 agreement with it, over the second half of each chunk's positions.
class ChunkScorer {
public:
    ChunkScorer(const Entries& entries, const EvalOptions& o)
        : n_ctx_(o.n_ctx),
          V_(entries[0].model->hparams().n_vocab),
          ref_lp_(static_cast<size_t>(o.n_ctx)),
          ref_p_(static_cast<size_t>(o.n_ctx)),
          cascade_(o.cascade) {
        for (const Entry& e : entries) {
            auto make = [&](const model::Model& m) {
                return std::make_unique<model::Context>(m, o.n_ctx, o.threads,
                                                        std::min(o.n_ctx, 512), e.kv);
            };
            ctxs_.push_back(make(e.edge && e.split_at >= 0 ? *e.edge : *e.model));
            // the split's other half
            clouds_.push_back(e.split_at >= 0 ? make(*e.model) : nullptr);
        }
        entries_ = entries;
    }

    // The chunk starting at tokens[start] (its first token replaced by bos when >= 0).
    void score(const std::vector<int32_t>& tokens, size_t start, int32_t bos,
               std::vector<Accumulator>& acc) {
        chunk_.assign(tokens.begin() + static_cast<std::ptrdiff_t>(start),
                      tokens.begin() + static_cast<std::ptrdiff_t>(start) + n_ctx_);
        if (bos >= 0) chunk_[0] = bos;
        for (size_t m = 0; m < ctxs_.size(); ++m) {
            ctxs_[m]->reset();
            const std::span<const float> logits =
                clouds_[m] ? split_logits(m) : ctxs_[m]->forward(chunk_, true);
            for (int j = n_ctx_ / 2; j < n_ctx_ - 1; ++j)
                score_row(m, j, logits.subspan(static_cast<size_t>(j) * V_, V_),
                          tokens[start + j + 1], acc[m]);
        }
    }

private:
    // The chunk through entry m's two halves: layers [0, L) in its context, the rows rounded as
    // its wire format carries them, the rest in its cloud context, a batch at a time.
    std::span<const float> split_logits(size_t m) {
        const Entry& e = entries_[m];
        const int64_t E = e.model->hparams().n_embd;
        const std::span<const float> res = ctxs_[m]->residual_until(e.split_at, chunk_);
        rows_.resize(res.size());
        infer::decode_rows(e.wire, infer::encode_rows(e.wire, res, n_ctx_, E), n_ctx_, E,
                           rows_.data());
        model::Context& cloud = *clouds_[m];
        cloud.reset();
        split_out_.resize(static_cast<size_t>(n_ctx_) * V_);
        const int batch = std::min(n_ctx_, 512);
        for (int at = 0; at < n_ctx_; at += batch) {
            const int n = std::min(batch, n_ctx_ - at);
            const std::span<const float> l = cloud.forward_from(
                e.split_at, std::span<const float>(rows_).subspan(static_cast<size_t>(at) * E,
                                                                  static_cast<size_t>(n) * E));
            std::copy(l.begin(), l.end(),
                      split_out_.begin() + static_cast<std::ptrdiff_t>(at) * V_);
        }
        return split_out_;
    }

    // The reference's log-probabilities of a row are kept, with their exponentials (taken once,
    // not once per model), for the models after it.
    void score_row(size_t m, int j, std::span<const float> logits, int32_t next, Accumulator& a) {
        std::vector<double>& cur = m == 0 ? ref_lp_[static_cast<size_t>(j)] : lp_;
        log_softmax(logits, cur);
        const double nll = -cur[static_cast<size_t>(next)];
        a.nll += nll;
        a.nll2 += nll * nll;
        ++a.n;
        const std::vector<double>& rl = ref_lp_[static_cast<size_t>(j)];
        std::vector<double>& rp = ref_p_[static_cast<size_t>(j)];
        double kl = 0;
        if (m == 0) {
            rp.resize(rl.size());
            for (int v = 0; v < V_; ++v) rp[v] = std::exp(rl[v]);
        } else {
            for (int v = 0; v < V_; ++v) kl += rp[v] * (rl[v] - cur[v]);
        }
        a.kl += kl;
        a.kl2 += kl * kl;
        const size_t top = argmax(cur);
        const bool agree = top == argmax(rl);
        a.agree += agree;
        if (cascade_ && m > 0) a.positions.push_back({std::exp(cur[top]), kl, agree});
    }

    int n_ctx_, V_;
    std::vector<std::unique_ptr<model::Context>> ctxs_, clouds_;
    Entries entries_;
    std::vector<float> rows_, split_out_;
    std::vector<std::vector<double>> ref_lp_, ref_p_;
    std::vector<double> lp_;
    std::vector<int32_t> chunk_;
    bool cascade_;
};

// llama-bench's figures, every entry once per repetition (round-robin), with mean and sd.
void measure_speed(const Entries& entries, const EvalOptions& o, EvalReport& r) {
    profile::BenchOptions b;
    b.threads = o.threads > 0 ? o.threads : 0;
    b.reps = 1;
    auto stats = [](const std::vector<double>& v, double& mean, double& sd) {
        mean = sd = 0;
        for (double x : v) mean += x;
        mean /= static_cast<double>(v.size());
        for (double x : v) sd += (x - mean) * (x - mean);
        sd = v.size() > 1 ? std::sqrt(sd / static_cast<double>(v.size() - 1)) : 0;
    };
    for (int rep = 0; rep < o.speed_reps; ++rep)
        for (size_t m = 0; m < entries.size(); ++m) {
            if (entries[m].split_at >= 0) continue;  // its speed is the link's
            ModelEval& e = r.models[m];
            b.kv_types = entries[m].kv;
            const model::Model& mm = *entries[m].model;
            if (o.speed_prompt > 0)
                e.prefill_samples.push_back(
                    profile::run_bench(mm, {o.speed_prompt, 0, o.speed_depth}, b).avg_ts);
            if (o.speed_gen > 0)
                e.decode_samples.push_back(
                    profile::run_bench(mm, {0, o.speed_gen, o.speed_depth}, b).avg_ts);
            if (o.log && rep + 1 == o.speed_reps)
                *o.log << "eval: speed of " << e.path << " (KV " << e.cache_type << ") measured\n"
                       << std::flush;
        }
    for (ModelEval& e : r.models) {
        if (!e.prefill_samples.empty()) stats(e.prefill_samples, e.prefill_ts, e.prefill_ts_stddev);
        if (!e.decode_samples.empty()) stats(e.decode_samples, e.decode_ts, e.decode_ts_stddev);
    }
}

}  // namespace

EvalReport evaluate(const std::vector<std::string>& paths, const std::vector<std::string>& texts,
                    const EvalOptions& o) {
    SYSLM_CHECK(!paths.empty(), "eval: no models");
    SYSLM_CHECK(!texts.empty(), "eval: no texts");
    SYSLM_CHECK(o.n_ctx >= 8, "eval: context size ", o.n_ctx, " is too small (minimum 8)");
    EvalReport r;
    r.n_ctx = o.n_ctx;
    r.threads = o.threads;
    r.texts = texts;
    const Models models = load_models(paths);
    std::unique_ptr<model::Model> edge;
    if (!o.split_edge.empty()) {
        SYSLM_CHECK(o.split_at >= 0, "eval: an edge file needs a split point");
        edge = std::make_unique<model::Model>(o.split_edge);
        const model::HParams &a = edge->hparams(), &b = models[0]->hparams();
        SYSLM_CHECK(a.n_vocab == b.n_vocab && a.n_embd == b.n_embd && a.n_layer >= o.split_at,
                    "eval: ", o.split_edge, " is not a copy of ", paths[0],
                    "'s first layers (vocabulary, width or layers differ)");
    }
    const Entries entries = make_entries(models, paths, o, r, edge.get());
    const auto tok = tokenizer::Tokenizer::from_gguf(models[0]->file());
    const int32_t bos = tok.add_bos() ? tok.bos() : -1;
    {
        ChunkScorer scorer(entries, o);
        for (const std::string& text_path : texts) {
            const std::vector<int32_t> tokens = tok.encode(read_whole_file(text_path), true, false);
            r.text_tokens.push_back(static_cast<int64_t>(tokens.size()));
            int64_t n_chunks = static_cast<int64_t>(tokens.size()) / o.n_ctx;
            SYSLM_CHECK(n_chunks > 0, "eval: ", text_path, " has ", tokens.size(),
                        " tokens, fewer than one chunk of ", o.n_ctx);
            if (o.max_chunks > 0) n_chunks = std::min<int64_t>(n_chunks, o.max_chunks);
            SYSLM_CHECK(o.first_chunk >= 0 && o.first_chunk < n_chunks, "eval: ", text_path,
                        ": chunk ", o.first_chunk, " is not among its ", n_chunks, " chunks");
            std::vector<Accumulator> acc(entries.size());
            for (int64_t c = o.first_chunk; c < n_chunks; ++c) {
                scorer.score(tokens, static_cast<size_t>(c * o.n_ctx), bos, acc);
                if (o.log)
                    *o.log << "eval: " << text_path << ": chunk " << c + 1 << "/" << n_chunks
                           << '\n'
                           << std::flush;
            }
            for (size_t m = 0; m < entries.size(); ++m)
                r.models[m].texts.push_back(acc[m].result());
        }
    }  // the contexts' memory is freed before the speed runs
    measure_speed(entries, o, r);
    return r;
}

std::string eval_label(const EvalReport& r, const ModelEval& m) {
    const std::string name = std::filesystem::path(m.path).filename().string();
    std::string label = r.cache_types ? name + " (KV " + m.cache_type + ")" : name;
    if (!m.split.empty()) {
        const size_t slash = m.split.find('/');
        label +=
            " (split at " + m.split.substr(0, slash) + ", " + m.split.substr(slash + 1) + " rows)";
    }
    return label;
}

// The cascade curves (EvalOptions::cascade) as a second table, "" without them.
static std::string cascade_markdown(const EvalReport& r) {
    std::ostringstream s;
    char buf[512];
    for (const ModelEval& m : r.models)
        for (size_t t = 0; t < m.texts.size(); ++t) {
            const std::vector<CascadePoint>& c = m.texts[t].cascade;
            if (c.empty()) continue;
            s << "\ncascade: " << eval_label(r, m) << " answers, " << eval_label(r, r.models[0])
              << " takes the least confident positions ("
              << std::filesystem::path(r.texts[t]).filename().string()
              << ")\n\n| deferred | defer below | top-1 agree | KL | at random: agree | at "
                 "random: KL |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n";
            for (const CascadePoint& p : c) {
                std::snprintf(buf, sizeof buf,
                              "| %.0f%% | %.4f | %.1f%% | %.5f | %.1f%% | %.5f |\n", 100 * p.share,
                              p.threshold, 100 * p.agreement, p.kl, 100 * p.random_agreement,
                              p.random_kl);
                s << buf;
            }
        }
    return s.str();
}

std::string eval_markdown(const EvalReport& r) {
    std::ostringstream s;
    s << "| model | size MiB | bits/weight | text | PPL | KL vs ref | top-1 agree | pp"
      << " tok/s | tg tok/s |\n| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n";
    char buf[512];
    for (const ModelEval& m : r.models)
        for (size_t t = 0; t < m.texts.size(); ++t) {
            const TextEval& e = m.texts[t];
            // A split's speed is the link's, not measured here.
            const std::string pp = m.split.empty() ? fixed_decimals(m.prefill_ts, 1) : "-";
            const std::string tg = m.split.empty() ? fixed_decimals(m.decode_ts, 1) : "-";
            std::snprintf(buf, sizeof buf,
                          "| %s | %.2f | %.2f | %s | %.3f ± %.3f | %.5f | %.1f%% | %s | %s |\n",
                          eval_label(r, m).c_str(),
                          static_cast<double>(m.file_bytes) / (1024.0 * 1024.0), m.bits_per_weight,
                          std::filesystem::path(r.texts[t]).filename().c_str(), e.ppl, e.ppl_stderr,
                          e.kl, 100.0 * e.top1, pp.c_str(), tg.c_str());
            s << buf;
        }
    s << cascade_markdown(r);
    return s.str();
}

std::string eval_json(const EvalReport& r) {
    nlohmann::json j;
    j["n_ctx"] = r.n_ctx;
    j["texts"] = r.texts;
    j["text_tokens"] = r.text_tokens;
    j["reference"] = r.models.empty() ? "" : r.models[0].path;
    for (const ModelEval& m : r.models) {
        nlohmann::json jm = {{"path", m.path},
                             {"cache_type", m.cache_type},
                             {"kv_bytes_per_position", m.kv_bytes_per_position},
                             {"file_bytes", m.file_bytes},
                             {"tensor_bytes", m.tensor_bytes},
                             {"n_params", m.n_params},
                             {"bits_per_weight", m.bits_per_weight},
                             {"types", m.types},
                             {"prefill_tokens_per_s", m.prefill_ts},
                             {"prefill_tokens_per_s_stddev", m.prefill_ts_stddev},
                             {"decode_tokens_per_s", m.decode_ts},
                             {"decode_tokens_per_s_stddev", m.decode_ts_stddev}};
        if (!m.split.empty()) jm["split"] = m.split;
        for (size_t t = 0; t < m.texts.size(); ++t) {
            const TextEval& e = m.texts[t];
            jm["texts"].push_back({{"text", r.texts[t]},
                                   {"scored_tokens", e.n_scored},
                                   {"ppl", e.ppl},
                                   {"ppl_stderr", e.ppl_stderr},
                                   {"kl", e.kl},
                                   {"kl_stderr", e.kl_stderr},
                                   {"top1_agreement", e.top1}});
            for (const CascadePoint& p : e.cascade)
                jm["texts"].back()["cascade"].push_back({{"share", p.share},
                                                         {"threshold", p.threshold},
                                                         {"agreement", p.agreement},
                                                         {"kl", p.kl},
                                                         {"random_agreement", p.random_agreement},
                                                         {"random_kl", p.random_kl}});
        }
        j["models"].push_back(jm);
    }
    return j.dump(2);
}

}  // namespace syslm::compress
