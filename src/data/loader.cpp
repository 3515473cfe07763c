#include "data/loader.hpp"

#include <algorithm>
#include <chrono>
#include <limits>

#include "core/error.hpp"

namespace syslm::data {
namespace {

uint64_t mix64(uint64_t z) {  // SplitMix64's finalizer
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

struct SplitMix64 {
    uint64_t state;
    uint64_t next() { return mix64(state += 0x9e3779b97f4a7c15ull); }
    // Uniform in [0, n), n > 0: Lemire's multiply-shift, rejecting the biased low products.
    uint64_t below(uint64_t n) {
        unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
        uint64_t low = static_cast<uint64_t>(m);
        if (low < n) {
            const uint64_t threshold = (0 - n) % n;
            while (low < threshold) {
                m = static_cast<unsigned __int128>(next()) * n;
                low = static_cast<uint64_t>(m);
            }
        }
        return static_cast<uint64_t>(m >> 64);
    }
};

// Checked before the shards are opened (a member initializer needs an expression).
const std::vector<std::string>& check_shape(const std::vector<std::string>& paths, int batch,
                                            int seq, const char* who) {
    SYSLM_CHECK(batch > 0 && seq > 0, who, ": batch (", batch, ") and sequence length (", seq,
                ") must be positive");
    return paths;
}

}  // namespace

// ---- ShardSet ----

ShardSet::ShardSet(const std::vector<std::string>& paths, uint64_t n_vocab, ShardOpenOptions opt)
    : n_vocab_(n_vocab) {
    SYSLM_CHECK(!paths.empty(), "no token shards given");
    shards_.reserve(paths.size());
    for (const auto& p : paths) {
        Shard& s = shards_.emplace_back(p, opt);
        if (n_vocab != 0 && s.verified() && s.max_token() >= n_vocab) {
            const uint64_t i = s.find_token_at_least(n_vocab);
            fail(p, ": token ", i, " is ", s[i], ", outside the model's vocabulary of ", n_vocab,
                 " tokens (were the shards prepared with another tokenizer?)");
        }
        n_tokens_ += s.size();
    }
}

uint64_t ShardSet::fingerprint() const {
    uint64_t h = mix64(shards_.size());
    for (const auto& s : shards_) h = mix64(h ^ s.checksum()) ^ mix64(s.size() + 1);
    return h;
}

// ---- WindowIndex ----

WindowIndex::WindowIndex(const ShardSet& set, uint64_t len, uint64_t stride)
    : len_(len), stride_(stride) {
    SYSLM_CHECK(len >= 2 && stride >= 1, "window of ", len, " tokens every ", stride,
                " tokens: need at least 2 tokens and a stride of at least 1");
    first_.push_back(0);
    for (const auto& s : set.shards()) {
        const uint64_t n = s.size() >= len ? (s.size() - len) / stride + 1 : 0;
        first_.push_back(first_.back() + n);
    }
    if (size() == 0) {
        std::string names;
        for (const auto& s : set.shards()) names += cat(names.empty() ? "" : ", ", s.path());
        fail(names, ": no shard holds a window of ", len, " tokens (", set.n_tokens(),
             " tokens in total); use a shorter sequence or more data");
    }
}

std::pair<size_t, uint64_t> WindowIndex::locate(uint64_t w) const {
    SYSLM_CHECK(w < size(), "window ", w, " of ", size());
    const auto it = std::upper_bound(first_.begin(), first_.end(), w);
    const size_t k = static_cast<size_t>(it - first_.begin()) - 1;
    return {k, (w - first_[k]) * stride_};
}

// ---- order ----

std::vector<uint32_t> epoch_order(uint64_t seed, uint64_t epoch, uint64_t n) {
    SYSLM_CHECK(n <= std::numeric_limits<uint32_t>::max(), n,
                " windows: more than 2^32 - 1; use a longer sequence or stride");
    std::vector<uint32_t> order(n);
    for (uint64_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
    SplitMix64 rng{mix64(seed) ^ mix64(epoch + 0x9e3779b97f4a7c15ull)};
    for (uint64_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
    return order;
}

// ---- BatchLoader ----

BatchLoader::BatchLoader(const std::vector<std::string>& paths, LoaderOptions opt,
                         LoaderPosition start)
    : opt_(opt),
      set_(check_shape(paths, opt.batch, opt.seq, "batch loader"), opt.n_vocab, opt.open),
      windows_(set_, uint64_t(opt.seq) + 1, opt.stride ? opt.stride : uint64_t(opt.seq)) {
    SYSLM_CHECK(windows_.size() <= std::numeric_limits<uint32_t>::max(), windows_.size(),
                " windows: more than 2^32 - 1; use a longer sequence or stride");
    for (auto& s : slots_) {
        s.batch.batch = opt_.batch;
        s.batch.seq = opt_.seq;
        s.batch.tokens.resize(size_t(opt_.batch) * (opt_.seq + 1));
        s.batch.window.resize(opt_.batch);
    }
    seek(start);
}

BatchLoader::~BatchLoader() {
    stop_thread();
}

uint64_t BatchLoader::fingerprint() const {
    uint64_t h = set_.fingerprint();
    for (uint64_t v : {uint64_t(opt_.seq), windows_.size(), opt_.seed}) h = mix64(h ^ v);
    return h;
}

void BatchLoader::seek(LoaderPosition pos) {
    SYSLM_CHECK(pos.index < windows_.size(), "data position (epoch ", pos.epoch, ", window ",
                pos.index, ") is past the ", windows_.size(),
                " windows of these shards: a position from other data or another --seq?");
    stop_thread();
    for (auto& s : slots_) s.state = SlotState::Empty;
    error_ = nullptr;
    stop_ = false;
    producer_slot_ = consumer_slot_ = 0;
    held_ = -1;
    producer_pos_ = consumer_pos_ = pos;
    start_thread();
}

void BatchLoader::start_thread() {
    thread_ = std::thread([this] { produce(); });
}

void BatchLoader::stop_thread() {
    if (!thread_.joinable()) return;
    {
        std::lock_guard lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void BatchLoader::produce() {
    try {
        for (;;) {
            Slot& s = slots_[producer_slot_];
            {
                std::unique_lock lock(mu_);
                cv_.wait(lock, [&] { return stop_ || s.state == SlotState::Empty; });
                if (stop_) return;
                s.state = SlotState::Filling;
            }
            fill(s.batch);  // outside the lock: the consumer never touches a Filling slot
            {
                std::lock_guard lock(mu_);
                s.state = SlotState::Full;
            }
            cv_.notify_all();
            producer_slot_ ^= 1;
        }
    } catch (...) {
        {
            std::lock_guard lock(mu_);
            error_ = std::current_exception();
        }
        cv_.notify_all();
    }
}

void BatchLoader::fill(Batch& b) {
    const uint64_t len = uint64_t(opt_.seq) + 1;
    b.start = producer_pos_;
    for (int r = 0; r < opt_.batch; ++r) {
        if (order_epoch_ != producer_pos_.epoch) {
            order_ = epoch_order(opt_.seed, producer_pos_.epoch, windows_.size());
            order_epoch_ = producer_pos_.epoch;
        }
        const uint64_t w = order_[producer_pos_.index];
        const auto [k, first] = windows_.locate(w);
        set_.shards()[k].read(first, len, b.tokens.data() + size_t(r) * len, set_.n_vocab());
        b.window[r] = w;
        if (++producer_pos_.index == windows_.size()) {
            producer_pos_.index = 0;
            ++producer_pos_.epoch;
        }
    }
    b.end = producer_pos_;
}

const Batch& BatchLoader::next() {
    std::unique_lock lock(mu_);
    if (held_ >= 0) {
        slots_[held_].state = SlotState::Empty;
        held_ = -1;
        cv_.notify_all();
    }
    Slot& s = slots_[consumer_slot_];
    const auto t0 = std::chrono::steady_clock::now();
    cv_.wait(lock, [&] { return s.state == SlotState::Full || error_; });
    last_wait_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    waited_s_ += last_wait_s_;
    if (s.state != SlotState::Full) std::rethrow_exception(error_);
    held_ = consumer_slot_;
    consumer_slot_ ^= 1;
    consumer_pos_ = s.batch.end;
    return s.batch;
}

// ---- SequentialLoader ----

SequentialLoader::SequentialLoader(const std::vector<std::string>& paths, int batch, int seq,
                                   uint64_t n_vocab, ShardOpenOptions open)
    : batch_(batch),
      seq_(seq),
      set_(check_shape(paths, batch, seq, "sequential loader"), n_vocab, open),
      windows_(set_, uint64_t(seq) + 1, uint64_t(seq)) {}

int SequentialLoader::next(std::vector<int32_t>& out) {
    const uint64_t len = uint64_t(seq_) + 1;
    const int rows = static_cast<int>(std::min<uint64_t>(batch_, windows_.size() - next_));
    out.resize(size_t(rows) * len);
    for (int r = 0; r < rows; ++r) {
        const auto [k, first] = windows_.locate(next_ + r);
        set_.shards()[k].read(first, len, out.data() + size_t(r) * len, set_.n_vocab());
    }
    next_ += rows;
    return rows;
}

}  // namespace syslm::data
