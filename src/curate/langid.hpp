// Language identification by byte n-grams, trained by syslm: the 1- to 4-byte n-grams of
// " " + case-folded text + " " (any encoding: UTF-8 characters are byte sequences), hashed into
// 2^18 buckets, scored by multinomial naive Bayes with additive smoothing; the probabilities are
// the posterior over the languages trained. Saved as a small GGUF file (general.type = langid,
// its labels, and the log-probabilities as an F32 tensor of GGML shape [labels, buckets]: a
// bucket's labels side by side, as prediction reads them).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace syslm::curate {

class LangId {
public:
    struct Sample {
        std::string label, text;
    };
    static LangId train(const std::vector<Sample>& samples, double alpha = 0.1);
    static LangId load(const std::string& path);  // throws Error naming a file that is not one
    void save(const std::string& path) const;

    struct Guess {
        std::string label;
        double prob = 0;
    };
    Guess predict(std::string_view text) const;
    const std::vector<std::string>& labels() const { return labels_; }

private:
    std::vector<std::string> labels_;
    std::vector<float> log_prior_;  // per label
    std::vector<float> log_prob_;   // bucket-major: buckets x labels
};

}  // namespace syslm::curate
