// `syslm data clean`: documents streamed from text files, those failing a quality rule dropped,
// exact and near duplicates removed
// (the first document of each cluster kept), the rest written in input order, one output file
// per input file, after substring dedup has cut repeated spans. Two passes over the inputs, and
// a third with substring dedup: decide (hashes and signatures on the thread pool, clusters in
// document order, so the result does not depend on the threads), find repeated spans, write.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "curate/documents.hpp"
#include "curate/filters.hpp"
#include "curate/minhash.hpp"
#include "curate/ngram_classifier.hpp"
#include "curate/scores.hpp"

namespace syslm::curate {

struct CleanOptions {
    std::vector<std::string> inputs;  // files or directories
    std::string out_dir;
    DocUnit unit = DocUnit::Blank;
    // Quality rules first (documents failing one are dropped before any dedup), then the dedup
    // steps in this order.
    std::optional<HeuristicFilters> filters;
    // Language: documents the identifier does not give to `lang` with at least min_lang_prob
    // are dropped (rule "lang"), before any dedup.
    std::optional<NgramClassifier> langid;
    std::string lang;
    double min_lang_prob = 0.5;
    // Quality: documents a `data classify` model (labels good / bad) gives P(good) below
    // min_quality are dropped (rule "quality"), before any dedup.
    std::optional<NgramClassifier> quality;
    double min_quality = 0.5;
    // Perplexity (CCNet's signal): documents whose `data score` perplexity (scores.hpp) exceeds
    // max_ppl are dropped (rule "perplexity"), before any dedup. The scores must cover every
    // document of the inputs, cut the same way.
    std::optional<DocumentScores> scores;
    double max_ppl = 0;
    bool exact = true, near = true;
    MinHashParams minhash;
    // Substring dedup on what the steps above kept: spans of at least this many words seen
    // earlier are cut (substring_dedup.hpp); 0: off.
    int substring_words = 0;
    int threads = 0;
    std::string clusters;  // optional JSONL: {"id", "file", "cluster", "step"} per document
    std::string report;    // optional HTML page: what each step removed, with examples
};

struct CleanReport {
    int64_t documents = 0, kept = 0, exact_duplicates = 0, near_duplicates = 0;
    int64_t substring_words = 0, emptied = 0;  // words cut; documents left with no word
    std::map<std::string, int64_t> filtered;   // documents dropped by each rule
    // Examples for the report, by reason ("exact", "near", a rule's name): the first few
    // documents each removed, each with its cluster's kept document (dedup) or none; snippets.
    struct Example {
        int64_t id = 0;
        std::string text, kept;
    };
    std::map<std::string, std::vector<Example>> examples;
    std::vector<int64_t> largest_clusters;  // sizes of the largest near-duplicate clusters
    int64_t bytes_in = 0, bytes_out = 0;
    int64_t candidate_pairs = 0;  // MinHash candidates verified
    std::string skipped;          // bad input skipped (DocumentReader::Skipped::summary), or ""
    std::vector<double> ppl;      // with scores: every document's perplexity (the histogram)
    double seconds = 0;
};

CleanReport clean(const CleanOptions& o);

}  // namespace syslm::curate
