// The attention kernel table of one vector type: the block kernels (attention_body.hpp) and the
// backward job (attention_backward_body.hpp) instantiated on V. Included only by an ISA's own
// file (x86/attention_avx2.cpp, x86/attention_avx512.cpp), which is compiled with that ISA's
// flags; see kernels/isa.hpp for the rules of ISA files.
#pragma once

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/attention_backward_body.hpp"
#include "kernels/cpu/attention_body.hpp"
#include "kernels/cpu/linear_attention_body.hpp"
#include "kernels/cpu/lora_body.hpp"

namespace syslm::kernels {
namespace {

template <class V>
AttentionKernels attention_table(Isa isa) {
    AttentionKernels k{};
    k.isa = isa;
    k.lanes = V::W;
    k.block = attend_block<V>;
    k.block_rows = attend_block_rows_f32<V>;
    k.block_rows_f16 = attend_block_rows_f16<V>;
    k.widen_f16 = widen_f16_rows<V>;
    k.backward_job = attention_backward_job<V>;
    k.linear = linear_attention_table<V>();
    k.lora = lora_table<V>();
    return k;
}

}  // namespace
}  // namespace syslm::kernels
