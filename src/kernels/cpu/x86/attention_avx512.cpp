// The attention block kernel (attention_body.hpp) on V512. Compiled with the avx512 flags; see
// kernels/isa.hpp for the rules of ISA files.
#include "kernels/cpu/x86/vec_avx512.hpp"

#include "kernels/cpu/attention_backward_body.hpp"
#include "kernels/cpu/attention_body.hpp"

namespace syslm::kernels::x86 {
namespace {

void block(const AttentionColumns& c, const float* k, const float* v, int64_t stride, int64_t p0,
           int np) {
    attend_block<V512>(c, k, v, stride, p0, np);
}

void block_rows(const AttentionColumns& c, const float* k, const float* v, int64_t stride,
                int64_t p0, int np) {
    attend_block_rows<V512>(c, k, v, stride, p0, np);
}

void widen_f16(const uint16_t* src, int64_t stride, int np, int d, float* dst) {
    widen_f16_rows<V512>(src, stride, np, d, dst);
}

void backward_job(const AttentionBackwardJob& job) {
    attention_backward_job<V512>(job);
}

}  // namespace

AttentionKernels attention_kernels_avx512() {
    AttentionKernels k{};
    k.isa = Isa::Avx512;
    k.lanes = V512::W;
    k.block = block;
    k.block_rows = block_rows;
    k.widen_f16 = widen_f16;
    k.backward_job = backward_job;
    return k;
}

}  // namespace syslm::kernels::x86
