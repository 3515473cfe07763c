// The scale searches of ggml's K-quant reference quantizers. Each picks, for one small group of
// values, integer levels L[i] and a scale (and for the asymmetric types a minimum) that make
// scale * L[i] (+ min) close to x[i] in a weighted least-squares sense, trying a few candidate
// scales around the naive one. The results must match ggml's exactly (same candidates, same float
// expressions in the same order, same tie-breaking), or syslm's files would differ from
// llama.cpp's.
#pragma once

#include <cstdint>

namespace syslm::kernels::detail {

// Symmetric levels L[i] in [0, 2*nmax) standing for L[i] - nmax (ggml's make_qx_quants with
// rmse_type 1): weights are qw[i] when given, x[i]^2 otherwise. Tries 18 scales around
// -nmax/max and keeps the one with the best weighted fit. Returns the scale.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, const float* qw);

// Symmetric levels for Q3_K (ggml's make_q3_quants with do_rmse): starts from the naive scale and
// then moves single levels while that improves the x^2-weighted fit (at most 5 sweeps).
// L[i] in [0, 2*nmax) stands for L[i] - nmax. Returns the scale.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L);

// Asymmetric levels L[i] in [0, nmax] with x ~ scale * L - the_min (ggml's make_qkx2_quants):
// tries nstep + 1 scales (nmax + rmin + rdelta * is) / (max - min), solving the weighted least
// squares for scale and min at each, and keeps the best by weighted squared (or absolute, with
// use_mad) error. `Laux` is scratch of n bytes. Returns the scale; *the_min >= 0 is the offset.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep,
                       bool use_mad);

// Non-negative levels L[i] in [0, nmax] for non-negative x (the sub-block scales and mins of the
// importance-weighted K-quantizers; ggml's make_qp_quants): tries 9 scales around nmax/max by
// weighted squared error, then moves single levels while that improves the fit (at most 5
// sweeps). Returns the scale.
float make_qp_quants(int n, int nmax, const float* x, uint8_t* L, const float* weights);

}  // namespace syslm::kernels::detail
