// The JSON lines `syslm data score` writes (curate/score.hpp): each document's perplexity, read
// back for the steps that use it (data clean --max-ppl, data mix --strata difficulty:K), which
// must see the same files cut into documents the same way (--docs).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace syslm::curate {

class DocumentScores {
public:
    // Throws Error naming the file and line for a line that is not data score's.
    explicit DocumentScores(const std::string& path);
    // The perplexity of the ordinal-th document of `file` (0 for a document too short to have
    // a scored token). Throws Error when that document has no score.
    double ppl(const std::string& file, size_t ordinal) const;
    // Throws Error when `file` was scored with another number of documents than `documents`.
    void check_count(const std::string& file, size_t documents) const;
    const std::string& path() const { return path_; }

private:
    std::string path_;
    std::map<std::string, std::vector<double>> by_file_;  // canonical path -> in document order
};

}  // namespace syslm::curate
