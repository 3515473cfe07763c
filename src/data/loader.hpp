// Training batches from token shards: seeded shuffled windows, filled on a prefetch thread.
//
// Windows. A window is seq + 1 consecutive tokens of one shard (row[0..seq) are the inputs,
// row[1..seq] the targets); windows never cross shards. In a shard of n tokens the windows start
// at 0, stride, 2·stride, ... while start + seq + 1 <= n; stride defaults to seq, so every token
// of a shard but the first is a target exactly once per epoch. Windows are numbered globally,
// shard by shard, in the order of the paths given.
//
// Order. Epoch e visits every window exactly once, in the order of a Fisher–Yates shuffle of
// 0..W-1 driven by SplitMix64 seeded with mix(seed) ^ mix(e + 0x9E3779B97F4A7C15) (mix = the
// SplitMix64 finalizer) and bounded draws by Lemire's multiply-shift with rejection, so the
// order depends only on (seed, e, W) — not on the standard library or the platform. Batches take
// the next B windows of the stream epoch 0, epoch 1, ...; a batch may straddle two epochs, so no
// window is dropped or repeated within an epoch. The position (epoch, index) is that of the next
// window in this stream: restoring it reproduces the same batches bit for bit.
//
// Prefetch. A background thread fills a ring of two batch buffers: while the trainer works on one
// batch, the next one is read. next() waits only when the thread is behind, and that time is
// summed (waited_s) for the trainer to report. An exception in the thread (a token outside the
// vocabulary, ...) is rethrown by the next() that would have returned the failed batch.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "data/shards.hpp"

namespace syslm::data {

// The shards of one split, mapped together.
class ShardSet {
public:
    // n_vocab > 0: every token must be < n_vocab. With opt.verify this is checked at open (and
    // checksums); without, as tokens are read. Throws Error naming the file.
    ShardSet(const std::vector<std::string>& paths, uint64_t n_vocab = 0,
             ShardOpenOptions opt = {});

    const std::vector<Shard>& shards() const { return shards_; }
    uint64_t n_tokens() const { return n_tokens_; }
    uint64_t n_vocab() const { return n_vocab_; }
    // Combines the shards' checksums and sizes: store it with a data position and compare on
    // resume, so a position is never applied to other data.
    uint64_t fingerprint() const;

private:
    std::vector<Shard> shards_;
    uint64_t n_tokens_ = 0, n_vocab_ = 0;
};

// Windows of `len` tokens every `stride` tokens in each shard of a set (see the top of the file).
class WindowIndex {
public:
    WindowIndex(const ShardSet& set, uint64_t len, uint64_t stride);
    uint64_t size() const { return first_.back(); }
    uint64_t len() const { return len_; }
    // (shard index, first token) of window w < size().
    std::pair<size_t, uint64_t> locate(uint64_t w) const;

private:
    std::vector<uint64_t> first_;  // first_[k]: number of windows in shards before k; back(): all
    uint64_t len_, stride_;
};

struct LoaderOptions {
    int batch = 0;        // B: windows per batch
    int seq = 0;          // T: each row holds T + 1 tokens
    uint64_t stride = 0;  // between window starts; 0 = seq
    uint64_t seed = 0;
    uint64_t n_vocab = 0;  // tokens must be < n_vocab (the model's vocabulary); 0 = no check
    ShardOpenOptions open;
};

// The next window of the stream: index-th of epoch `epoch`'s order.
struct LoaderPosition {
    uint64_t epoch = 0;
    uint64_t index = 0;
    bool operator==(const LoaderPosition&) const = default;
};

struct Batch {
    int batch = 0, seq = 0;
    std::vector<int32_t> tokens;   // [batch][seq + 1]
    std::vector<uint64_t> window;  // the window number of each row
    LoaderPosition start, end;     // stream position of the first row / after the last row
    const int32_t* row(int b) const { return tokens.data() + size_t(b) * (seq + 1); }
};

// The order of epoch `epoch` over n windows (what the loader visits; exposed for tests).
std::vector<uint32_t> epoch_order(uint64_t seed, uint64_t epoch, uint64_t n_windows);

class BatchLoader {
public:
    BatchLoader(const std::vector<std::string>& shard_paths, LoaderOptions opt,
                LoaderPosition start = {});
    ~BatchLoader();  // stops and joins the prefetch thread
    BatchLoader(const BatchLoader&) = delete;
    BatchLoader& operator=(const BatchLoader&) = delete;

    // The next batch; valid until the next call of next() or seek(). Rethrows an error of the
    // prefetch thread. Call from one thread only.
    const Batch& next();
    // Of the batch the next next() returns (save it in a checkpoint with fingerprint()).
    LoaderPosition position() const { return consumer_pos_; }
    // Continues from `pos` (from position()); the batches that follow are those that followed
    // `pos` the first time. Throws when pos.index >= n_windows().
    void seek(LoaderPosition pos);

    uint64_t n_windows() const { return windows_.size(); }
    uint64_t fingerprint() const;  // data + window layout + seed
    const ShardSet& shards() const { return set_; }
    double waited_s() const { return waited_s_; }  // total time next() waited for the thread
    double last_wait_s() const { return last_wait_s_; }

private:
    enum class SlotState { Empty, Filling, Full };
    struct Slot {
        Batch batch;
        SlotState state = SlotState::Empty;
    };

    void start_thread();
    void stop_thread();
    void produce();
    void fill(Batch& b);

    LoaderOptions opt_;
    ShardSet set_;
    WindowIndex windows_;

    // Producer side (the thread only, or the caller while the thread is stopped).
    LoaderPosition producer_pos_;
    uint64_t order_epoch_ = ~0ull;
    std::vector<uint32_t> order_;
    int producer_slot_ = 0;

    // Consumer side.
    LoaderPosition consumer_pos_;
    int consumer_slot_ = 0;
    int held_ = -1;  // slot whose batch the caller holds
    double waited_s_ = 0, last_wait_s_ = 0;

    std::mutex mu_;
    std::condition_variable cv_;
    Slot slots_[2];
    bool stop_ = false;
    std::exception_ptr error_;
    std::thread thread_;
};

// The windows of a split in order, seq + 1 tokens every seq tokens, for evaluation.
class SequentialLoader {
public:
    SequentialLoader(const std::vector<std::string>& shard_paths, int batch, int seq,
                     uint64_t n_vocab = 0, ShardOpenOptions open = {});
    uint64_t n_windows() const { return windows_.size(); }
    // Fills `out` with the next min(batch, windows left) windows, [rows][seq + 1], and returns
    // rows; 0 when every window has been read. reset() starts again from the first window.
    int next(std::vector<int32_t>& out);
    void reset() { next_ = 0; }

private:
    int batch_, seq_;
    ShardSet set_;
    WindowIndex windows_;
    uint64_t next_ = 0;
};

}  // namespace syslm::data
