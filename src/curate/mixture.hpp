// `syslm data mix`: sources of text, each with a weight, become strata (a source whole, or its
// documents in difficulty levels by a perplexity score), each a prepared data set of its own,
// and one training mixture of them.
//
// Layout of the output directory:
//   strata/<stratum>/   train/val shards + meta.json of that stratum (data/prepare.hpp), so a
//                       stratum can be evaluated (its loss) or trained alone
//   train_NNN.bin       the mixture: chunks of chunk_tokens tokens drawn from each stratum's train
//                       split in proportion to its weight (a stratum short of its share repeats,
//                       a long one is cut), in a seeded shuffled order
//   val_NNN.bin         every stratum's val split, chunk by chunk in turn: the same mixed
//                       validation set whatever the weights, so that mixtures can be compared on
//                       it, and its first batches hold every stratum
//   meta.json           as data prepare's: `syslm train --data DIR` reads the mixture directly
//   mixture.json        the sources, strata (source, level, perplexity range, weight, tokens,
//                       repeats) and the seed
//
// Difficulty. With levels K > 0 and a scores file (JSON lines of `syslm data score`: file, id,
// ppl for the same files and document unit), each source's documents are ranked by perplexity
// and cut into K levels of equal document counts, the lowest perplexity "easy" (a document too
// short to score, perplexity 0, ranks easiest): levels are named
// easy / hard (K = 2), easy / medium / hard (K = 3), else d0 .. d(K-1). A stratum's name is
// "<source>.<level>". A source's weight is split over its levels by their train tokens.
//
// Search. With search_runs > 0 the weights come from the mixture search instead
// (curate/mixture_search.hpp): its proxy runs' mixtures go under OUT/search/run_i, and
// mixture.json gets a "search" block (the runs, the fit, the predicted losses).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "curate/documents.hpp"
#include "curate/mixture_search.hpp"
#include "data/prepare.hpp"

namespace syslm::curate {

struct MixSource {
    std::string name;                // a stratum name part: letters, digits, '_' and '-'
    std::vector<std::string> paths;  // files or directories of text
    double weight = 1;               // relative; normalised over the sources
};

// Parses NAME=PATH[:WEIGHT] (the CLI's --source); throws Error saying what is wrong.
MixSource parse_mix_source(const std::string& spec);

struct MixOptions {
    std::vector<MixSource> sources;
    DocUnit unit = DocUnit::Blank;
    data::DatasetOptions data;  // tokenizer path, output directory, val fraction, chunk tokens
    uint64_t train_tokens = 0;  // of the mixture; 0: as many as the strata's train splits hold
    uint64_t seed = 1;
    int levels = 0;           // difficulty levels per source; 0: one stratum per source
    std::string scores_path;  // `data score`'s JSON lines, when levels > 0
    // The mixture search (curate/mixture_search.hpp): with runs > 0 the strata's weights are the
    // search's choice, not the sources'.
    int search_runs = 0;
    ProxySpec proxy;
    int threads = 0;  // of each proxy run; 0: all cores
};

struct Stratum {
    std::string name, source, level;  // level "" without difficulty levels
    int level_index = 0;              // 0 = easiest
    double weight = 0;                // its share of the mixture's train tokens
    uint64_t docs = 0, train_tokens = 0, val_tokens = 0;
    double ppl_min = 0, ppl_max = 0;  // of its documents, with difficulty levels
    uint64_t mixed_tokens = 0;        // in the mixture
    double repeats() const {
        return train_tokens ? double(mixed_tokens) / double(train_tokens) : 0;
    }
};

struct MixResult {
    std::vector<Stratum> strata;
    data::DataMeta meta;  // of the mixture
    // With a search: its runs (weights, val loss), the fitted model, the uniform and the natural
    // mixtures' predicted losses, and the chosen weights' (in strata[i].weight).
    std::vector<SearchRun> runs;
    MixtureModel fit;
    double predicted_chosen = 0, predicted_uniform = 0, predicted_natural = 0;
};

// Throws Error naming the file for unreadable inputs, a source without text, a document without
// a score, or a stratum whose val split is empty.
MixResult mix_data(const MixOptions& opt, const tokenizer::Tokenizer& tok);

std::string mixture_json_path(const std::string& dir);  // <dir>/mixture.json

// A mixture of the strata already under opt.data.out_dir/strata at their weights: budget train
// tokens and the mixed val, written as a data set into `dir` (sets each stratum's mixed_tokens).
data::DataMeta write_mixture_set(const MixOptions& opt, std::vector<Stratum>& strata,
                                 uint64_t budget, const std::string& dir,
                                 const tokenizer::Tokenizer& tok);

}  // namespace syslm::curate
