#include "curate/ngram_classifier.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>

#include "core/error.hpp"
#include "curate/normalize.hpp"
#include "io/gguf.hpp"

namespace syslm::curate {

namespace {

constexpr int kBucketBits = 18;
constexpr size_t kBuckets = size_t{1} << kBucketBits;
constexpr int kMaxN = 4;

// The buckets of a text's features (with repeats: counts): its byte 1- to 4-grams, and with
// `words` also its words and consecutive word pairs (fastText's word n-grams, wordNgrams = 2, as
// in the CCNet / DCLM quality classifiers): byte n-grams see spelling but not word order.
template <class F>
void for_each_ngram(std::string_view text, bool words, F f) {
    std::string t = " ";
    for (const char c : text) {  // case-folded ASCII, whitespace runs as one space
        const auto u = static_cast<unsigned char>(c);
        if (std::isspace(u)) {
            if (t.back() != ' ') t += ' ';
        } else {
            t += static_cast<char>(std::tolower(u));
        }
    }
    if (t.back() != ' ') t += ' ';
    const std::string_view v(t);
    for (size_t i = 0; i < t.size(); ++i)
        for (int n = 1; n <= kMaxN && i + static_cast<size_t>(n) <= t.size(); ++n)
            f(hash_bytes(v.substr(i, static_cast<size_t>(n)), 7) & (kBuckets - 1));
    if (!words) return;
    // words are the spans between spaces: " w " and " w1 w2 "
    for (size_t a = 0, b = t.find(' ', 1); b != std::string::npos;) {
        f(hash_bytes(v.substr(a, b + 1 - a), 11) & (kBuckets - 1));
        const size_t c = b + 1 < t.size() ? t.find(' ', b + 1) : std::string::npos;
        if (c == std::string::npos) break;
        f(hash_bytes(v.substr(a, c + 1 - a), 13) & (kBuckets - 1));
        a = b;
        b = c;
    }
}

}  // namespace

// Two labels, discriminatively (fastText's supervised mode has the same linear form): logistic
// regression of the first label against the second on the mean of a document's feature weights,
// by SGD (8 epochs in a seeded order, step 0.5, L2 1e-6); the first label's log_prob column holds
// the weights, the second's zeros, so scoring is shared with naive Bayes.
NgramClassifier NgramClassifier::train_logistic(NgramClassifier m,
                                                const std::vector<Sample>& samples,
                                                const std::map<std::string, size_t>& index) {
    SYSLM_CHECK(m.labels_.size() == 2, m.kind_, ": needs exactly two labels, not ",
                m.labels_.size());
    std::vector<std::vector<uint32_t>> features(samples.size());
    std::vector<double> y(samples.size());
    for (size_t i = 0; i < samples.size(); ++i) {
        for_each_ngram(samples[i].text, true,
                       [&](uint64_t b) { features[i].push_back(static_cast<uint32_t>(b)); });
        y[i] = index.at(samples[i].label) == 0 ? 1.0 : 0.0;
    }
    std::vector<double> w(kBuckets, 0.0);
    double bias = 0;
    constexpr double kStep = 0.5, kL2 = 1e-6;
    uint64_t state = 0x9E3779B97F4A7C15ull;
    std::vector<size_t> order(samples.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (int epoch = 0; epoch < 8; ++epoch) {
        for (size_t i = order.size(); i > 1; --i) {  // Fisher-Yates on splitmix64
            uint64_t x = (state += 0x9E3779B97F4A7C15ull);
            x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
            x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
            std::swap(order[i - 1], order[(x ^ (x >> 31)) % i]);
        }
        for (const size_t i : order) {
            const std::vector<uint32_t>& f = features[i];
            if (f.empty()) continue;
            const double inv = 1.0 / static_cast<double>(f.size());
            double z = bias;
            for (const uint32_t b : f) z += w[b] * inv;
            const double g = 1.0 / (1.0 + std::exp(-z)) - y[i];
            bias -= kStep * g;
            for (const uint32_t b : f) w[b] -= kStep * (g * inv + kL2 * w[b]);
        }
    }
    m.log_prior_ = {static_cast<float>(bias), 0.0f};
    m.log_prob_.assign(2 * kBuckets, 0.0f);
    for (size_t b = 0; b < kBuckets; ++b) m.log_prob_[2 * b] = static_cast<float>(w[b]);
    return m;
}

NgramClassifier NgramClassifier::train(const std::vector<Sample>& samples, double alpha,
                                       std::string kind) {
    SYSLM_CHECK(!samples.empty(), kind, ": no training text");
    std::map<std::string, size_t> index;
    for (const Sample& s : samples) index.emplace(s.label, 0);
    SYSLM_CHECK(index.size() >= 2, kind, ": training needs at least two labels");
    NgramClassifier m;
    m.kind_ = std::move(kind);
    for (auto& [label, i] : index) {
        i = m.labels_.size();
        m.labels_.push_back(label);
    }
    if (m.kind_ == "quality") return train_logistic(std::move(m), samples, index);
    const size_t L = m.labels_.size();
    std::vector<double> counts(L * kBuckets, 0), totals(L, 0), docs(L, 0);
    for (const Sample& s : samples) {
        const size_t l = index[s.label];
        ++docs[l];
        for_each_ngram(s.text, m.quality(), [&](uint64_t b) {
            counts[b * L + l] += 1;
            totals[l] += 1;
        });
    }
    m.log_prior_.resize(L);
    m.log_prob_.resize(L * kBuckets);
    for (size_t l = 0; l < L; ++l) {
        m.log_prior_[l] =
            static_cast<float>(std::log(docs[l] / static_cast<double>(samples.size())));
        const double denom = std::log(totals[l] + alpha * static_cast<double>(kBuckets));
        for (size_t b = 0; b < kBuckets; ++b)
            m.log_prob_[b * L + l] =
                static_cast<float>(std::log(counts[b * L + l] + alpha) - denom);
    }
    return m;
}

std::vector<double> NgramClassifier::scores(std::string_view text) const {
    const size_t L = labels_.size();
    std::vector<double> score(L, 0.0);
    size_t n = 0;
    for_each_ngram(text, quality(), [&](uint64_t b) {
        const float* row = log_prob_.data() + b * L;  // the bucket's labels, side by side
        for (size_t l = 0; l < L; ++l) score[l] += row[l];
        ++n;
    });
    // naive Bayes sums log-likelihoods; the logistic model (quality) averages its weights
    const double scale = quality() && n > 0 ? 1.0 / static_cast<double>(n) : 1.0;
    for (size_t l = 0; l < L; ++l) score[l] = log_prior_[l] + scale * score[l];
    return score;
}

namespace {

// The posterior of label l from the log scores: 1 / sum_k exp(s_k - s_l).
double posterior(const std::vector<double>& score, size_t l) {
    double z = 0;
    for (const double s : score) z += std::exp(s - score[l]);
    return 1.0 / z;
}

}  // namespace

NgramClassifier::Guess NgramClassifier::predict(std::string_view text) const {
    const std::vector<double> score = scores(text);
    const auto best =
        static_cast<size_t>(std::max_element(score.begin(), score.end()) - score.begin());
    return {labels_[best], posterior(score, best)};
}

double NgramClassifier::prob(std::string_view text, const std::string& label) const {
    const auto it = std::find(labels_.begin(), labels_.end(), label);
    if (it == labels_.end()) return 0;
    return posterior(scores(text), static_cast<size_t>(it - labels_.begin()));
}

void NgramClassifier::save(const std::string& path) const {
    io::GGUFWriter w;
    w.set("general.type", io::GGUFValue::string(kind_));
    w.set(kind_ + ".labels", io::GGUFValue::strings(labels_));
    w.set(kind_ + ".log_prior", io::GGUFValue::f32s(log_prior_));
    w.set(kind_ + ".ngram_max", io::GGUFValue::u32(kMaxN));
    w.add_tensor(kind_ + ".log_prob", DType::F32,
                 {static_cast<int64_t>(labels_.size()), static_cast<int64_t>(kBuckets)},
                 log_prob_.data(), log_prob_.size() * sizeof(float));
    w.write(path);
}

NgramClassifier NgramClassifier::load(const std::string& path, const std::string& kind) {
    const io::GGUFFile f(path);
    SYSLM_CHECK(f.get_string("general.type", "") == kind, path, ": not a ",
                kind == "langid" ? "language-identification" : "quality",
                " model (general.type is not '", kind, "')");
    NgramClassifier m;
    m.kind_ = kind;
    m.labels_ = f.get(kind + ".labels").as_strings();
    m.log_prior_ = f.get(kind + ".log_prior").as_f32s();
    const io::GGUFTensor& t = f.tensor(kind + ".log_prob");
    SYSLM_CHECK(t.type == DType::F32 && t.ne.size() == 2 &&
                    t.ne[1] == static_cast<int64_t>(kBuckets) &&
                    t.ne[0] == static_cast<int64_t>(m.labels_.size()) &&
                    m.log_prior_.size() == m.labels_.size() && m.labels_.size() >= 2,
                path, ": ", kind, ".log_prob is not F32 [labels, ", kBuckets, "]");
    m.log_prob_.resize(kBuckets * m.labels_.size());
    std::memcpy(m.log_prob_.data(), t.data, m.log_prob_.size() * sizeof(float));
    return m;
}

}  // namespace syslm::curate
