// How a decode matmul (one token) reads its weights: each thread takes an even share of the rows
// and reads them as one stream, or as two streams (rows from its share's two halves in turn).
// Which is faster depends on the CPU's prefetchers, not on a feature flag: on an Intel Xeon with
// AMX (2 threads) two streams read a Q4_0_G8 dot loop at ~100% of a plain SIMD read sum against
// ~80% for one (L1B Q4_0 decode +9%); on an AMD EPYC Zen 4 one stream was 5-20% faster for
// Q4_0_G8 and Q8_0_G8W. So each process measures it on its own weights: after a warm-up, decode
// calls that read at least 1 MiB alternate the two ways, per weight type, and once both have
// enough samples the faster (bytes per second over all their calls) is kept. The order of rows
// never changes any result. The choice is remembered for the machine (kernels/kernel_choices.hpp):
// later processes start with it and time nothing. SYSLM_DECODE_STREAMS=1|2 fixes the choice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.hpp"

namespace syslm::kernels {

// Decode calls reading fewer weight bytes are never timed: the pool's hand-off dominates them.
inline constexpr size_t kDecodeStreamsMinBytes = 256 * 1024;

struct DecodeStreamsChoice {
    int streams = 0;           // 1 or 2 once chosen (or fixed by the environment); 0: not yet
    bool from_env = false;
    bool remembered = false;      // read from the machine's kernel choices, not timed here
    double gb_per_s[2] = {0, 0};  // measured rate of one and of two streams (0: no sample)
    int64_t samples[2] = {0, 0};
};

// The state for weights of `type` (for reports).
DecodeStreamsChoice decode_streams_choice(DType type);

// One line per weight type decoded in this process so far: its choice and the measured rates;
// empty when no decode call was large enough to time.
std::string describe_decode_streams();

// One decode call: streams() says how to read this call's weights; the destructor records its
// time when it was a trial.
class DecodeStreamsCall {
public:
    DecodeStreamsCall(DType type, const void* weights, size_t weight_bytes);
    ~DecodeStreamsCall();
    DecodeStreamsCall(const DecodeStreamsCall&) = delete;
    DecodeStreamsCall& operator=(const DecodeStreamsCall&) = delete;
    int streams() const { return streams_; }

private:
    void* state_ = nullptr;  // the type's trial state while this call is a trial
    DType type_;
    size_t bytes_ = 0;
    int streams_ = 2;
    int64_t t0_ns_ = 0;
};

}  // namespace syslm::kernels
