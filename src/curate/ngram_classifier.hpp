// A text classifier by byte n-grams, trained by syslm: the 1- to 4-byte n-grams of " " +
// case-folded text + " " (any encoding: UTF-8 characters are byte sequences), hashed into 2^18
// buckets, scored by multinomial naive Bayes with additive smoothing; the probabilities are the
// posterior over the labels trained. The quality kind adds words and consecutive word pairs
// (word order, as fastText's wordNgrams = 2) and is fitted discriminatively, by logistic
// regression on the mean of a document's feature weights: naive Bayes let the byte n-grams of
// shuffled good text outvote its broken word order. Two kinds: language identification (`data
// langid`, labels are languages) and document quality (`data classify`, labels "good" and "bad", as
// the fastText quality classifiers of CCNet and DCLM). Saved as a small GGUF file (general.type =
// the kind, its labels under <kind>.labels, and the log-probabilities as an F32 tensor
// <kind>.log_prob of GGML shape [labels, buckets]: a bucket's labels side by side, as prediction
// reads them).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace syslm::curate {

class NgramClassifier {
public:
    struct Sample {
        std::string label, text;
    };
    // kind: "langid" or "quality" (general.type of the saved file)
    static NgramClassifier train(const std::vector<Sample>& samples, double alpha = 0.1,
                                 std::string kind = "langid");
    // Throws Error naming a file that is not a classifier of this kind.
    static NgramClassifier load(const std::string& path, const std::string& kind = "langid");
    void save(const std::string& path) const;
    // P(label | text) (0 for a label it does not know)
    double prob(std::string_view text, const std::string& label) const;

    struct Guess {
        std::string label;
        double prob = 0;
    };
    Guess predict(std::string_view text) const;
    const std::vector<std::string>& labels() const { return labels_; }

private:
    static NgramClassifier train_logistic(NgramClassifier m, const std::vector<Sample>& samples,
                                          const std::map<std::string, size_t>& index);
    std::vector<double> scores(std::string_view text) const;  // log prior + log likelihoods
    bool quality() const { return kind_ == "quality"; }       // words, word pairs, logistic
    std::string kind_ = "langid";
    std::vector<std::string> labels_;
    std::vector<float> log_prior_;  // per label
    std::vector<float> log_prob_;   // bucket-major: buckets x labels
};

}  // namespace syslm::curate
