// A read-only memory map of a whole file (RAII). Model weights are used straight from the map:
// nothing is copied, and pages are read lazily by the OS.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace syslm {

// Drops this process's pages of [p, p + n) of a read-only file mapping (whole pages inside it
// only): they stay in the page cache, and a later read faults them back in. For data that has
// been copied or converted out of the mapping.
void release_mapped_pages(const void* p, size_t n);

class MappedFile {
public:
    explicit MappedFile(const std::string& path);  // throws Error naming the path
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    std::span<const uint8_t> bytes() const { return {data_, size_}; }
    const std::string& path() const { return path_; }

private:
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

// Writes `path` atomically: content goes to a temporary file beside it, which is flushed and
// renamed over `path` only when complete, so a crash never leaves a half-written file.
class AtomicFileWriter {
public:
    explicit AtomicFileWriter(std::string path);
    ~AtomicFileWriter();  // removes the temporary file unless commit() succeeded
    AtomicFileWriter(const AtomicFileWriter&) = delete;
    AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

    void write(const void* data, size_t n);
    uint64_t offset() const { return offset_; }
    void commit();

private:
    std::string path_, tmp_path_;
    int fd_ = -1;
    uint64_t offset_ = 0;
    bool committed_ = false;
};

// The bytes of the file at `path`; throws Error "<path>: cannot open" when it cannot be read.
std::string read_whole_file(const std::string& path);

// The whole of `text` as the content of `path`, through an AtomicFileWriter.
void write_file_atomically(const std::string& path, std::string_view text);

}  // namespace syslm
