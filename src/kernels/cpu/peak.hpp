// Micro-kernels that measure the machine's limits for `syslm probe` and the rooflines of
// `syslm bench`: how fast the cores can multiply-add (FP32 FMA, BF16 pair dot products, u8 x s8
// dot products) when nothing else limits them, and how fast memory streams. The compute loops keep
// a dozen independent accumulators in registers, enough to cover the instruction latency, so
// they run at the issue rate of the arithmetic units.
//
// Variants: scalar (peak.cpp), AVX2 (x86/peak_avx2.cpp: FMA ymm, int8 via vpmaddubsw + vpmaddwd
// as ggml does without VNNI, no BF16) and AVX-512 (x86/peak_avx512.cpp: FMA zmm, vpdpbusd,
// vdpbf16ps when the CPU has AVX512_BF16) and the AMX tiles (x86/peak_amx.cpp) where present.
#pragma once

#include <cstdint>

#include "kernels/isa.hpp"

namespace syslm::kernels {

struct PeakKernels {
    Isa isa;
    // Each runs `iters` iterations and returns the number of arithmetic operations done (a
    // multiply-add counts 2). *sink receives a value of the accumulators so that the loop is not
    // optimised away.
    using ComputeFn = double (*)(int64_t iters, float* sink);
    ComputeFn fma_f32;
    ComputeFn dot_bf16;        // null: this variant has no BF16 dot-product instruction
    ComputeFn dot_int8;        // u8 x s8 products summed into s32
    const char* fma_f32_insn;  // the instruction measured, e.g. "vfmadd231ps zmm"
    const char* dot_bf16_insn;
    const char* dot_int8_insn;
    // Sum of p[0..n): streams memory in, nothing out.
    float (*read_sum)(const float* p, int64_t n);
    // dst[0..n) = src[0..n) with ordinary (cached) stores.
    void (*copy)(float* dst, const float* src, int64_t n);
    // The AMX tile unit (tdpbf16ps, tdpbssd); null unless the CPU has it and the OS granted it.
    ComputeFn tile_bf16;
    ComputeFn tile_int8;
};

// The variant for `isa`; throws Error if this CPU does not support it.
const PeakKernels& peak_kernels(Isa isa);
// The variant of the active ISA (kernels::active_isa()).
const PeakKernels& peak_kernels();

namespace x86 {
// Defined in the ISA files.
PeakKernels peak_kernels_avx2();
PeakKernels peak_kernels_avx512(bool with_bf16);
double peak_amx_bf16(int64_t iters, float* sink);  // x86/peak_amx.cpp
double peak_amx_int8(int64_t iters, float* sink);
}  // namespace x86

}  // namespace syslm::kernels
