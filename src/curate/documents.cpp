#include "curate/documents.hpp"

#include <algorithm>
#include <filesystem>

#include "core/error.hpp"
#include "data/prepare.hpp"
#include "tokenizer/utf8.hpp"

namespace syslm::curate {

namespace fs = std::filesystem;

DocUnit doc_unit(const std::string& name) {
    if (name == "file") return DocUnit::File;
    if (name == "blank") return DocUnit::Blank;
    if (name == "line") return DocUnit::Line;
    if (name == "percent") return DocUnit::Percent;
    fail("document unit '", name, "': expected file, blank, line or percent");
}

std::vector<std::string> input_files(const std::vector<std::string>& paths) {
    std::vector<std::string> out;
    for (const std::string& p : paths) {
        SYSLM_CHECK(fs::exists(p), p, ": no such file or directory");
        if (!fs::is_directory(p)) {
            out.push_back(p);
            continue;
        }
        std::vector<std::string> inside;
        for (const auto& e : fs::recursive_directory_iterator(p))
            if (e.is_regular_file()) inside.push_back(e.path().string());
        std::sort(inside.begin(), inside.end());
        out.insert(out.end(), inside.begin(), inside.end());
    }
    SYSLM_CHECK(!out.empty(), "no input files");
    return out;
}

DocumentReader::DocumentReader(std::vector<std::string> files, DocUnit unit)
    : files_(std::move(files)), unit_(unit) {}

namespace {

// A file that is empty, or binary (data::is_binary_file).
const char* unreadable_kind(std::ifstream& in) {
    if (in.peek() == std::char_traits<char>::eof()) return "empty";
    in.clear();
    return data::is_binary_file(in) ? "binary" : nullptr;
}

}  // namespace

bool DocumentReader::next(Document& d) {
    while (next_raw(d)) {
        if (!tokenizer::utf8_valid(d.text)) {  // never silently turned into tokens
            ++skipped_.invalid_utf8;
            continue;
        }
        d.id = next_id_++;
        return true;
    }
    return false;
}

bool DocumentReader::next_raw(Document& d) {
    d.text.clear();
    std::string line;
    while (file_ < files_.size()) {
        if (!open_) {
            in_ = std::ifstream(files_[file_], std::ios::binary);
            SYSLM_CHECK(in_, files_[file_], ": cannot open");
            if (const char* kind = unreadable_kind(in_)) {
                ++(kind[0] == 'e' ? skipped_.empty_files : skipped_.binary_files);
                in_.close();
                ++file_;
                continue;
            }
            open_ = true;
        }
        bool got = false;
        while (std::getline(in_, line)) {
            if (!line.empty() && line.back() == '\r') line.pop_back();
            const bool blank = line.find_first_not_of(" \t") == std::string::npos;
            if (unit_ == DocUnit::Line) {
                if (blank) continue;
                d.text = line;
                got = true;
                break;
            }
            if ((unit_ == DocUnit::Blank && blank) || (unit_ == DocUnit::Percent && line == "%")) {
                if (d.text.empty()) continue;
                got = true;
                break;
            }
            if (unit_ == DocUnit::Percent && blank && d.text.empty()) continue;
            if (!d.text.empty()) d.text += '\n';
            d.text += line;
        }
        SYSLM_CHECK(!in_.bad(), files_[file_], ": read error");
        if (!got && !d.text.empty()) got = true;  // the file's last block, or the whole file
        const int index = static_cast<int>(file_);
        if (!got || in_.eof()) {
            in_.close();
            open_ = false;
            ++file_;
        }
        if (got) {
            d.file = index;
            return true;
        }
    }
    return false;
}

std::string DocumentReader::Skipped::summary() const {
    if (binary_files + empty_files + invalid_utf8 == 0) return "";
    return "skipped " + std::to_string(binary_files) + " binary and " +
           std::to_string(empty_files) + " empty files, " + std::to_string(invalid_utf8) +
           " documents that are not UTF-8";
}

}  // namespace syslm::curate
