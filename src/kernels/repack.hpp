// Load-time weight layouts. A GGUF file stores each matrix in a file type (Q4_0, ...); some
// types compute faster regrouped for the SIMD kernels, so the model loader converts those
// matrices once, at load, into a run-time type (core/dtype.hpp: runtime_only) that holds the same
// numbers in the same bytes per row. Today: Q4_0 -> Q4_0_G8 (8 blocks' scales together, so
// one FMA scales 8 blocks; see block_layouts.hpp), with AVX-512 VNNI, Q8_0 -> Q8_0_G8W (the
// same grouping, quants offset to u8 for vpdpbusd), measured in bench/RESULTS.md, and the
// K-quants Q4_K / Q5_K / Q6_K -> *_LANE (levels in lane order, one scale multiply per lane)
// where their decode times faster on this CPU (lane_order_choice).
#pragma once

#include <cstdint>

#include "core/dtype.hpp"
#include "kernels/kernel_choices.hpp"

namespace syslm::kernels {

// The lane-order layout of a K-quant file type (Q4_K, Q5_K, Q6_K), or the type itself.
DType lane_layout(DType file);

// Whether Q4_K / Q5_K / Q6_K matrices are read in lane order on this CPU: "lane" or "file",
// timed once per machine and remembered (kernel_choices.hpp); an empty value for other types
// and the scalar tier.
const KernelChoice& lane_order_choice(DType file);

// The run-time type for a matrix of `type` with rows of n_in elements under the active ISA, or
// `type` itself when it is best read as stored.
DType load_layout(DType type, int64_t n_in);

// n_rows rows of n_in elements from `from` into `to` == load_layout(from, n_in) (same bytes).
void repack_rows(DType from, DType to, const void* src, void* dst, int64_t n_in, int64_t n_rows);

}  // namespace syslm::kernels
