#include "curate/langid.hpp"

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

// The buckets of text's byte n-grams (with repeats: counts).
template <class F>
void for_each_ngram(std::string_view text, F f) {
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
    for (size_t i = 0; i < t.size(); ++i)
        for (int n = 1; n <= kMaxN && i + static_cast<size_t>(n) <= t.size(); ++n)
            f(hash_bytes(std::string_view(t).substr(i, static_cast<size_t>(n)), 7) &
              (kBuckets - 1));
}

}  // namespace

LangId LangId::train(const std::vector<Sample>& samples, double alpha) {
    SYSLM_CHECK(!samples.empty(), "langid: no training text");
    std::map<std::string, size_t> index;
    for (const Sample& s : samples) index.emplace(s.label, 0);
    SYSLM_CHECK(index.size() >= 2, "langid: training needs at least two languages");
    LangId m;
    for (auto& [label, i] : index) {
        i = m.labels_.size();
        m.labels_.push_back(label);
    }
    const size_t L = m.labels_.size();
    std::vector<double> counts(L * kBuckets, 0), totals(L, 0), docs(L, 0);
    for (const Sample& s : samples) {
        const size_t l = index[s.label];
        ++docs[l];
        for_each_ngram(s.text, [&](uint64_t b) {
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

LangId::Guess LangId::predict(std::string_view text) const {
    const size_t L = labels_.size();
    std::vector<double> score(log_prior_.begin(), log_prior_.end());
    for_each_ngram(text, [&](uint64_t b) {
        const float* row = log_prob_.data() + b * L;  // the bucket's labels, side by side
        for (size_t l = 0; l < L; ++l) score[l] += row[l];
    });
    const size_t best =
        static_cast<size_t>(std::max_element(score.begin(), score.end()) - score.begin());
    double z = 0;
    for (const double s : score) z += std::exp(s - score[best]);
    return {labels_[best], 1.0 / z};
}

void LangId::save(const std::string& path) const {
    io::GGUFWriter w;
    w.set("general.type", io::GGUFValue::string("langid"));
    w.set("langid.labels", io::GGUFValue::strings(labels_));
    w.set("langid.log_prior", io::GGUFValue::f32s(log_prior_));
    w.set("langid.ngram_max", io::GGUFValue::u32(kMaxN));
    w.add_tensor("langid.log_prob", DType::F32,
                 {static_cast<int64_t>(labels_.size()), static_cast<int64_t>(kBuckets)},
                 log_prob_.data(), log_prob_.size() * sizeof(float));
    w.write(path);
}

LangId LangId::load(const std::string& path) {
    const io::GGUFFile f(path);
    SYSLM_CHECK(f.get_string("general.type", "") == "langid", path,
                ": not a language-identification model (general.type is not 'langid')");
    LangId m;
    m.labels_ = f.get("langid.labels").as_strings();
    m.log_prior_ = f.get("langid.log_prior").as_f32s();
    const io::GGUFTensor& t = f.tensor("langid.log_prob");
    SYSLM_CHECK(t.type == DType::F32 && t.ne.size() == 2 &&
                    t.ne[1] == static_cast<int64_t>(kBuckets) &&
                    t.ne[0] == static_cast<int64_t>(m.labels_.size()) &&
                    m.log_prior_.size() == m.labels_.size() && m.labels_.size() >= 2,
                path, ": langid.log_prob is not F32 [labels, ", kBuckets, "]");
    m.log_prob_.resize(kBuckets * m.labels_.size());
    std::memcpy(m.log_prob_.data(), t.data, m.log_prob_.size() * sizeof(float));
    return m;
}

}  // namespace syslm::curate
