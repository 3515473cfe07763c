// The files of a checkpoint directory, and how a directory is swapped in so that a crash or a
// kill at any moment leaves one complete checkpoint that a resume finds.
//
// A save writes every file into `<dir>.tmp` (each file itself atomically: temporary file, fsync,
// rename), and `state.bin` last: a directory whose state.bin is present with a valid checksum is
// complete. Then
//     rename(<dir>, <dir>.old); rename(<dir>.tmp, <dir>); remove <dir>.old
// A kill between the two renames leaves no <dir> but two complete copies, the newer .tmp and the
// older .old; a kill while .tmp is written leaves <dir> (or .old) and an incomplete .tmp.
// recover_checkpoint() puts the newest complete copy back at <dir> and removes the others; a
// resume and every save call it first.
#pragma once

#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "core/checksum.hpp"
#include "core/mapped_file.hpp"

namespace syslm::train {

// Whether `dir` holds a state.bin whose checksum is right (written last, so the rest is there).
bool checkpoint_complete(const std::string& dir);
// Leaves `dir` as the newest complete checkpoint among dir, dir.tmp and dir.old, and removes the
// others. Returns false when there is none (nothing is changed then).
bool recover_checkpoint(const std::string& dir);
// Recovers `dir` (as above) and starts an empty `<dir>.tmp` for the files of a new checkpoint.
void begin_checkpoint(const std::string& dir);
// Puts the complete `<dir>.tmp` (its state.bin written last) in place of `dir` (the sequence
// above; the renames are made durable with an fsync of the parent directory).
void swap_in_checkpoint(const std::string& dir);

// Writes a file atomically, ending it with a checksum: the WordHash (core/checksum.hpp) of every
// byte before it, as 8 little-endian bytes.
class ChecksummedWriter {
public:
    explicit ChecksummedWriter(std::string path) : file_(std::move(path)) {}
    void write(const void* data, size_t n) {
        file_.write(data, n);
        hash_.update(data, n);
    }
    void floats(std::span<const float> v);  // a u64 count, then the values
    void commit();

private:
    AtomicFileWriter file_;
    WordHash hash_;
};

// Reads the fields of a checkpoint file in order; every error names the file and the field. With
// `checksummed`, the whole file is verified against its last 8 bytes first, and the fields may
// not run into them.
class CheckpointReader {
public:
    CheckpointReader(std::string path, bool checksummed);
    void read(void* p, size_t n, const char* what);
    // A u64 count, at most `limit`, then that many floats.
    std::vector<float> floats(const char* what, uint64_t limit);
    // Fails unless every byte before the checksum was read (no trailing bytes).
    void expect_end();
    const std::string& path() const { return path_; }

private:
    std::string path_;
    std::ifstream in_;
    uint64_t pos_ = 0, end_ = 0;
};

}  // namespace syslm::train
