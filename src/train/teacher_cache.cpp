#include "train/teacher_cache.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <numeric>
#include <ostream>
#include <vector>

#include "core/error.hpp"
#include "data/loader.hpp"
#include "data/shards.hpp"
#include "train/teacher.hpp"

namespace syslm::train {
namespace {

constexpr char kMagic[4] = {'S', 'Y', 'T', 'C'};
constexpr uint32_t kVersion = 1;

struct Header {
    char magic[4];
    uint32_t version, k, seq, n_vocab;
    uint64_t n_windows, data_fp, teacher_fp;
};
static_assert(sizeof(Header) == 48);

size_t window_bytes(int seq, int k) {
    return static_cast<size_t>(seq) * static_cast<size_t>(k) * (sizeof(int32_t) + sizeof(float));
}

uint64_t data_fingerprint(const std::string& data_dir) {
    return data::ShardSet(data::split_shard_paths(data_dir, "train")).fingerprint();
}

}  // namespace

uint64_t teacher_fingerprint(const std::string& teacher_path) {
    std::ifstream in(teacher_path, std::ios::binary | std::ios::ate);
    SYSLM_CHECK(in, teacher_path, ": cannot open the teacher");
    const auto size = static_cast<uint64_t>(in.tellg());
    in.seekg(0);
    std::vector<char> head(static_cast<size_t>(std::min<uint64_t>(size, 1 << 20)));
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    uint64_t h = 0xcbf29ce484222325ull ^ size;
    for (char c : head) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
    return h;
}

void build_teacher_cache(const std::string& path, const std::string& data_dir,
                         const std::string& teacher_path, Teacher& teacher, int seq, int k,
                         std::ostream* log) {
    const int V = teacher.n_vocab();
    SYSLM_CHECK(k > 0 && k <= V, "teacher cache: top-k ", k, " for a vocabulary of ", V);
    const data::ShardSet set(data::split_shard_paths(data_dir, "train"), static_cast<uint64_t>(V));
    const data::WindowIndex windows(set, static_cast<uint64_t>(seq) + 1, static_cast<uint64_t>(seq));
    Header h{};
    std::memcpy(h.magic, kMagic, 4);
    h.version = kVersion;
    h.k = static_cast<uint32_t>(k);
    h.seq = static_cast<uint32_t>(seq);
    h.n_vocab = static_cast<uint32_t>(V);
    h.n_windows = windows.size();
    h.data_fp = set.fingerprint();
    h.teacher_fp = teacher_fingerprint(teacher_path);
    AtomicFileWriter w(path);
    w.write(&h, sizeof h);
    std::vector<int32_t> tokens(static_cast<size_t>(seq)), ids(static_cast<size_t>(seq) * k),
        order(static_cast<size_t>(V));
    std::vector<float> logits(static_cast<size_t>(seq) * V), top(static_cast<size_t>(seq) * k);
    for (uint64_t win = 0; win < windows.size(); ++win) {
        const auto [shard, first] = windows.locate(win);
        for (int t = 0; t < seq; ++t)
            tokens[static_cast<size_t>(t)] = static_cast<int32_t>(set.shards()[shard][first + t]);
        teacher.logits(tokens, 1, seq, logits.data());
        for (int t = 0; t < seq; ++t) {
            const float* row = logits.data() + static_cast<size_t>(t) * V;
            std::iota(order.begin(), order.end(), 0);
            std::partial_sort(order.begin(), order.begin() + k, order.end(),
                              [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
            for (int j = 0; j < k; ++j) {
                ids[static_cast<size_t>(t) * k + j] = order[static_cast<size_t>(j)];
                top[static_cast<size_t>(t) * k + j] = row[order[static_cast<size_t>(j)]];
            }
        }
        w.write(ids.data(), ids.size() * sizeof(int32_t));
        w.write(top.data(), top.size() * sizeof(float));
        if (log && (win + 1) % 200 == 0)
            *log << "teacher cache: " << win + 1 << "/" << windows.size() << " windows\n"
                 << std::flush;
    }
    w.commit();
    if (log)
        *log << "teacher cache: wrote " << path << " (" << windows.size() << " windows of " << seq
             << " positions, top " << k << ")\n";
}

TeacherCache::TeacherCache(const std::string& path, const std::string& data_dir,
                           const std::string& teacher_path, int seq, int k, int n_vocab)
    : map_(std::make_unique<MappedFile>(path)), k_(k), seq_(seq) {
    SYSLM_CHECK(map_->size() >= sizeof(Header), path, ": truncated teacher cache (",
                map_->size(), " bytes)");
    Header h;
    std::memcpy(&h, map_->data(), sizeof h);
    SYSLM_CHECK(std::memcmp(h.magic, kMagic, 4) == 0 && h.version == kVersion, path,
                ": not a syslm teacher cache (version 1)");
    SYSLM_CHECK(h.k == static_cast<uint32_t>(k) && h.seq == static_cast<uint32_t>(seq) &&
                    h.n_vocab == static_cast<uint32_t>(n_vocab),
                path, ": cache of top ", h.k, " over windows of ", h.seq, " (vocabulary ",
                h.n_vocab, "); this run needs top ", k, ", ", seq, ", ", n_vocab);
    SYSLM_CHECK(h.data_fp == data_fingerprint(data_dir), path, ": cache of other data than ",
                data_dir);
    SYSLM_CHECK(h.teacher_fp == teacher_fingerprint(teacher_path), path,
                ": cache of another teacher than ", teacher_path);
    n_windows_ = h.n_windows;
    SYSLM_CHECK(map_->size() == sizeof(Header) + n_windows_ * window_bytes(seq, k), path,
                ": ", map_->size(), " bytes, expected ",
                sizeof(Header) + n_windows_ * window_bytes(seq, k), " (truncated?)");
}

const int32_t* TeacherCache::ids(uint64_t w) const {
    SYSLM_CHECK(w < n_windows_, "teacher cache: window ", w, " of ", n_windows_);
    return reinterpret_cast<const int32_t*>(map_->data() + sizeof(Header) + w * window_bytes(seq_, k_));
}

const float* TeacherCache::logits(uint64_t w) const {
    return reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(ids(w)) +
                                          static_cast<size_t>(seq_) * k_ * sizeof(int32_t));
}

}  // namespace syslm::train
