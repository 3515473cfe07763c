#include "curate/scores.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace syslm::curate {
namespace {

std::string canonical(const std::string& p) {
    std::error_code ec;
    const std::filesystem::path c = std::filesystem::weakly_canonical(p, ec);
    return ec ? p : c.string();
}

}  // namespace

DocumentScores::DocumentScores(const std::string& path) : path_(path) {
    std::ifstream in(path);
    SYSLM_CHECK(in, path, ": cannot open the scores file");
    std::map<std::string, std::vector<std::pair<int64_t, double>>> by_file;
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
        if (line.empty()) continue;
        try {
            const nlohmann::json j = nlohmann::json::parse(line);
            by_file[canonical(j.at("file").get<std::string>())].push_back(
                {j.at("id").get<int64_t>(), j.at("ppl").get<double>()});
        } catch (const nlohmann::json::exception& e) {
            fail(path, ":", n, ": not a line of `syslm data score` (file, id, ppl): ", e.what());
        }
    }
    for (auto& [file, scores] : by_file) {
        std::sort(scores.begin(), scores.end());
        for (const auto& s : scores) by_file_[file].push_back(s.second);
    }
}

double DocumentScores::ppl(const std::string& file, size_t ordinal) const {
    const auto it = by_file_.find(canonical(file));
    SYSLM_CHECK(it != by_file_.end() && ordinal < it->second.size(), path_,
                ": no score for document ", ordinal, " of ", file,
                " (score the same files with the same --docs)");
    return it->second[ordinal];
}

void DocumentScores::check_count(const std::string& file, size_t documents) const {
    const auto it = by_file_.find(canonical(file));
    const size_t n = it == by_file_.end() ? 0 : it->second.size();
    SYSLM_CHECK(n == documents, path_, ": ", n, " scores for ", file, ", which holds ", documents,
                " documents (score the same files with the same --docs)");
}

}  // namespace syslm::curate
