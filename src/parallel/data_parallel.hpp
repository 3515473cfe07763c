// Data parallel's gradient reduction, overlapped with the backward pass: the gradient arena is
// cut into buckets (contiguous ranges, one per block plus one for the rest); the backward calls
// ready(b) as soon as bucket b's gradients are final, and a communication thread sums that
// bucket over the group while the backward goes on with the blocks below. finish() waits for
// every bucket. Only the communication thread calls the communicator between start() and
// finish().
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "parallel/communicator.hpp"
#include "parallel/grad_compress.hpp"

namespace syslm::parallel {

class GradientReducer {
public:
    struct Bucket {
        size_t begin, end;  // float offsets into the gradient arena
    };
    // AllReduce: every rank ends with every bucket's sum. ReduceScatter (ZeRO-2): each bucket is
    // cut into size() nearly equal consecutive blocks (shard_of) and each rank ends with the sum
    // of its own block only; the rest of its arena keeps its local gradients.
    // Compressed (gradient compression, 1-bit Adam's two phases with the optimizer between
    // them, as ZeRO): each rank sends every other rank its compressed share of that rank's block
    // (all-to-all), keeping what the compression lost for its next step (error feedback); the
    // owner adds the decoded shares to its own exact one, so each rank ends with its blocks'
    // sums, as ReduceScatter. The owner then updates its blocks and all_gather_updates() sends
    // the compressed updates. start(grads, false): an exact reduce-scatter (warm-up).
    enum class Mode { AllReduce, ReduceScatter, Compressed };
    GradientReducer(Communicator& comm, std::vector<Bucket> buckets, Mode mode = Mode::AllReduce,
                    Compressor compressor = Compressor(Compression::None));
    ~GradientReducer();
    GradientReducer(const GradientReducer&) = delete;
    GradientReducer& operator=(const GradientReducer&) = delete;

    const std::vector<Bucket>& buckets() const { return buckets_; }
    // Rank r's block of a bucket (ZeRO's shards: its optimizer state and parameter updates).
    static Bucket shard_of(const Bucket& b, int rank, int ranks);
    // The sizes of every rank's block of a bucket (the counts of a reduce-scatter / all-gather).
    static std::vector<size_t> shard_counts(const Bucket& b, int ranks);
    // A step's reduction of `grads` begins; every bucket must be made ready() once before
    // finish().
    // `compress` false: this step's reduction is exact even in Compressed mode (warm-up).
    void start(float* grads, bool compress = true);
    void ready(size_t bucket);  // from the thread running the backward
    // Called when the backward has ended: waits until every bucket is summed over the group;
    // rethrows the communication thread's error.
    void finish();
    // Compressed mode, after the owners' optimizer steps: `values` are the weights every rank
    // shares, `master` this rank's exact weights of its blocks (shard_of every bucket, in bucket
    // order, concatenated). Each owner sends master - values compressed (an update plus what
    // earlier messages lost: error feedback in weight space) and every rank adds every decoded
    // difference to its values, so all ranks keep identical weights.
    void all_gather_updates(float* values, const float* master);

    // Compressed mode: what this rank's messages have lost so far and will add to its next
    // ones (error feedback), in the arena's layout; a checkpoint keeps it so that a resumed run
    // delivers it as the uninterrupted one would. Empty in the other modes. Not while a step
    // runs.
    std::vector<float>& residual() { return sent_error_; }
    // Compressed mode: per-value divisors (arena layout, the same on every rank) under which the
    // gradient shares are compressed: a rank sends C(x / d) and the owner adds d * decoded, so
    // the compression error of each value is proportional to d. With d = AdamW's sqrt(v) the
    // error is even in the optimizer's step, where plain compression puts most of it on the
    // values with small gradients (see docs/design/distributed.md). Empty: none.
    std::vector<float>& divisors() { return divisor_; }

    // Seconds the communication thread spent reducing, and the part of it that ran before
    // finish() was called (hidden behind the backward), summed over steps.
    double comm_seconds() const { return comm_s_; }
    double hidden_seconds() const { return hidden_s_; }
    double overlap() const { return comm_s_ > 0 ? hidden_s_ / comm_s_ : 0; }

private:
    void run();
    Communicator& comm_;
    std::vector<Bucket> buckets_;
    Mode mode_;
    bool compress_ = true;  // of the running step
    std::vector<float> block_;  // ReduceScatter, Compressed: this rank's summed block
    // Compressed: the compressor, the error-feedback residual (arena offsets: what this rank's
    // shares lost) and message buffers.
    Compressor compressor_;
    std::vector<float> sent_error_, scratch_, decoded_, divisor_;
    std::vector<uint8_t> out_, in_, gathered_;
    void reduce_compressed(const Bucket& k);
    void reduce_scatter(const Bucket& k);
    float* grads_ = nullptr;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<size_t> queue_;
    size_t pending_ = 0;  // buckets not yet reduced this step
    std::vector<char> seen_;
    bool stop_ = false, finishing_ = false;
    std::exception_ptr error_;
    double comm_s_ = 0, hidden_s_ = 0;
    std::thread thread_;
};

}  // namespace syslm::parallel
