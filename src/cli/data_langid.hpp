// `syslm data langid` (curate/ngram_classifier.hpp): train a language identifier on labelled text
// (--train LANG=PATH ...) and / or measure one on held-out text (--test LANG=PATH ...).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace syslm::cli {

std::pair<CLI::App*, std::function<int()>> add_data_langid(CLI::App& data);
// `syslm data classify train`: the same n-gram classifier for document quality (good / bad).
std::pair<CLI::App*, std::function<int()>> add_data_classify(CLI::App& data);

}  // namespace syslm::cli
