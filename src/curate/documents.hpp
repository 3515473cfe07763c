// The documents a curation step keeps or drops, streamed from text files: each file whole, each
// blank-line-separated block (KJV chapters, fortunes) or each non-empty line. Files are read
// line by line, so the inputs need not fit in memory; a directory stands for its regular files,
// sorted by path.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace syslm::curate {

// Percent: blocks between lines holding a lone "%" (the fortune file format).
enum class DocUnit { File, Blank, Line, Percent };
// "file" | "blank" | "line" | "percent"; throws Error otherwise
DocUnit doc_unit(const std::string& name);

struct Document {
    int64_t id = 0;    // 0, 1, 2, ... over all inputs, in order
    int file = 0;      // index into the reader's files()
    std::string text;  // as read; a block's lines joined by '\n' (no trailing newline)
};

// The files `paths` name (directories expanded), in order; throws Error naming a missing path.
std::vector<std::string> input_files(const std::vector<std::string>& paths);

// Bad input is skipped and counted, never turned into documents: empty files, binary files (a
// NUL byte in the first 8 KiB) and documents that are not valid UTF-8.
class DocumentReader {
public:
    DocumentReader(std::vector<std::string> files, DocUnit unit);
    bool next(Document& d);  // false after the last document
    const std::vector<std::string>& files() const { return files_; }
    struct Skipped {
        int64_t binary_files = 0, empty_files = 0, invalid_utf8 = 0;
        std::string summary() const;  // "" when nothing was skipped
    };
    const Skipped& skipped() const { return skipped_; }

private:
    bool next_raw(Document& d);  // the next document, whatever its bytes
    Skipped skipped_;
    std::vector<std::string> files_;
    DocUnit unit_;
    size_t file_ = 0;
    bool open_ = false;
    std::ifstream in_;
    int64_t next_id_ = 0;
};

}  // namespace syslm::curate
