// Offline distillation: the teacher's top-k next-token logits over every training window of a
// data directory, computed once and memory-mapped for every epoch after. Windows are those the
// training loader uses (seq + 1 tokens every seq tokens, data/loader.hpp), so a batch row's
// window number finds its soft targets.
//
// File: "SYTC", u32 version 1, u32 k, u32 seq, u32 n_vocab, u64 n_windows, u64 data fingerprint
// (data::ShardSet::fingerprint of the train split), u64 teacher fingerprint (file size and a hash
// of its first MiB), then per window seq rows of k int32 ids followed by k float32 logits. Written
// atomically; a cache of other data, another teacher or other k / seq is refused, naming it.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>

#include "core/mapped_file.hpp"

namespace syslm::train {

class Teacher;

uint64_t teacher_fingerprint(const std::string& teacher_path);

// Runs `teacher` over every window of data_dir's train split (windows of seq + 1 tokens every seq)
// and writes the top-k logits of each position to `path`.
void build_teacher_cache(const std::string& path, const std::string& data_dir,
                         const std::string& teacher_path, Teacher& teacher, int seq, int k,
                         std::ostream* log);

class TeacherCache {
public:
    // Checks the header against what the run expects; throws an Error naming the file.
    TeacherCache(const std::string& path, const std::string& data_dir,
                 const std::string& teacher_path, int seq, int k, int n_vocab);
    int k() const { return k_; }
    int seq() const { return seq_; }
    uint64_t n_windows() const { return n_windows_; }
    // seq x k ids and logits of window w.
    const int32_t* ids(uint64_t w) const;
    const float* logits(uint64_t w) const;

private:
    std::unique_ptr<MappedFile> map_;
    int k_ = 0, seq_ = 0;
    uint64_t n_windows_ = 0;
};

}  // namespace syslm::train
