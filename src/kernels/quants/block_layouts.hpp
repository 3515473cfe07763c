// On-disk block layouts of the quantized tensor types, byte for byte as GGUF stores them (ggml's
// ggml-common.h). A row of n elements is n / block_size consecutive blocks, no padding between.
// Scales marked "f16" are IEEE half bit patterns (see core/half.hpp); all multi-byte fields are
// little-endian, which is what the structs give on the little-endian hosts syslm supports.
//
// Legacy types: blocks of 32 elements.
//   Q4_0  x = d * (q - 8),        q in [0, 15]
//   Q4_1  x = d * q + m,          q in [0, 15]
//   Q5_0  x = d * (q - 16),       q in [0, 31]
//   Q5_1  x = d * q + m,          q in [0, 31]
//   Q8_0  x = d * q,              q in [-127, 127]
//   Q8_1  x = d * q, and s = d * sum(q) for the dot products against Q4_1/Q5_1.
//   4-bit nibbles: element j (j < 16) is the low nibble of qs[j], element j + 16 the high nibble.
//   5th bits (Q5_x): bit j of the little-endian uint32 qh is the high bit of element j.
//
// K-quants: super-blocks of QK_K = 256 elements split into sub-blocks with their own quantized
// scales; the super-block carries f16 scales for those scales.
//   Q2_K  16 x 16: x = d * (scales[i] & 15) * q - dmin * (scales[i] >> 4),   q in [0, 3]
//   Q3_K  16 x 16: x = d * (s6[i] - 32) * (q - 4),  q in [0, 7]; q's low 2 bits in qs, 3rd
//         bit in hmask (bit set = +4). 6-bit scales s6 packed into 12 bytes: low nibbles of
//         scales[0..7] hold s6[0..7], their high nibbles s6[8..15]; 2-bit pairs of
//         scales[8..11] hold the top bits (s6[i] top bits at scales[8 + i%4] >> 2*(i/4)).
//   Q4_K   8 x 32: x = d * sc[i] * q - dmin * m[i],  q in [0, 15]; 6-bit sc/m packed into 12
//         bytes (see unpack_scale_min_k4 in k_quant_pack.hpp).
//   Q5_K   8 x 32: as Q4_K with q in [0, 31], 5th bit in qh.
//   Q6_K  16 x 16: x = d * scales[i] * (q - 32),  q in [0, 63], low 4 bits in ql, high 2 in qh.
//   Q8_K  256:     x = d * q (d is f32), bsums[i] = sum of q over elements 16i..16i+15.
//   2-bit planes (Q2_K/Q3_K qs, Q6_K qh): in each 128-element half, byte l of its 32 bytes holds
//   elements l, l+32, l+64, l+96 at bit offsets 0, 2, 4, 6. 4-bit planes (Q4_K/Q5_K qs): in each
//   64-element chunk, byte l holds element l (low nibble) and l+32 (high nibble). Q6_K ql: in
//   each 128-element half, byte l (l < 32) holds elements l / l+64, byte 32+l holds l+32 / l+96.
//
// Run-time layouts (never in files; made at load time, see kernels/repack.hpp): groups of 8
// legacy blocks of one row (256 elements). Per-block fields are stored in "slot order": slot s
// holds block kG8Block[s] = 0, 2, 4, 6, 1, 3, 5, 7 — the order in which three rounds of
// pairwise horizontal adds (vphaddd) leave the 8 block sums of the SIMD kernel.
//   Q4_0_G8  d[8] f16 scales in slot order, then the 8 blocks' 16 nibble bytes in block order.
//   Q8_0_G8  partner of Q4_0_G8: d[8] f32 scales (the f16 scales of Q8_0, widened) and s[8]
//            sums of the quants, both in slot order; then the quants by pairs of blocks
//            (2p, 2p + 1): elements 0..15 of both, then 16..31 of both — the elements that
//            the low and the high nibbles of the pair's 32 nibble bytes hold.
//   Q8_0_G8W Q8_0 weights for the same kernel (AVX-512 VNNI only): d[8] f16 scales in slot
//            order, then the quants plus 128, as u8 — vpdpbusd's unsigned operand, the
//            activations its signed one; the offset comes back out through the activations'
//            sums — in Q8_0_G8's pair order.
// Lane order (Q4_K_LANE, Q6_K_LANE and their partner Q8_K_LANE): the block's fields and packing
// are the file type's, but its 256 levels are permuted. Read as an 8 x 8 matrix of 4-element
// units, element 32j + 4v + k (k < 4) moves to where element 32v + 4j + k was: the matrix is
// transposed, so the permutation is its own inverse (lane_position). The unpacking code of the
// file type then yields level vectors v = 0..7 (32 bytes each) whose int32 lane j holds only
// elements of the 32-element group j: Q4_K's sub-block j, Q6_K's sub-blocks 2j (v < 4) and
// 2j + 1 (v >= 4). One scale vector then serves every level vector of a block (or half), so the
// SIMD dot sums the lanes' products first and scales each lane once (quant_dot_body.hpp), where
// the file layout needs one broadcast scale per sub-block. Q8_K_LANE keeps Q8_K's d and bsums
// (sums over the file order's 16-element runs) and permutes only qs.
#pragma once

#include <cstdint>

namespace syslm::kernels {

inline constexpr int QK4_0 = 32;
inline constexpr int QK4_1 = 32;
inline constexpr int QK5_0 = 32;
inline constexpr int QK5_1 = 32;
inline constexpr int QK8_0 = 32;
inline constexpr int QK8_1 = 32;
inline constexpr int QK_K = 256;
inline constexpr int K_SCALE_SIZE = 12;

struct BlockQ4_0 {
    uint16_t d;             // f16 scale
    uint8_t qs[QK4_0 / 2];  // nibbles
};

struct BlockQ4_1 {
    uint16_t d;             // f16 scale
    uint16_t m;             // f16 minimum
    uint8_t qs[QK4_1 / 2];  // nibbles
};

struct BlockQ5_0 {
    uint16_t d;             // f16 scale
    uint8_t qh[4];          // 5th bits, little-endian uint32
    uint8_t qs[QK5_0 / 2];  // low nibbles
};

struct BlockQ5_1 {
    uint16_t d;             // f16 scale
    uint16_t m;             // f16 minimum
    uint8_t qh[4];          // 5th bits, little-endian uint32
    uint8_t qs[QK5_1 / 2];  // low nibbles
};

struct BlockQ8_0 {
    uint16_t d;  // f16 scale
    int8_t qs[QK8_0];
};

struct BlockQ8_1 {
    uint16_t d;  // f16 scale
    uint16_t s;  // f16 of d * sum(qs)
    int8_t qs[QK8_1];
};

struct BlockQ2_K {
    uint8_t scales[QK_K / 16];  // low nibble: scale, high nibble: min, per 16 elements
    uint8_t qs[QK_K / 4];       // 2-bit planes
    uint16_t d;                 // f16 scale of the scales
    uint16_t dmin;              // f16 scale of the mins
};

struct BlockQ3_K {
    uint8_t hmask[QK_K / 8];  // 3rd bit: element 32*b + m is bit b of hmask[m]
    uint8_t qs[QK_K / 4];     // 2-bit planes (low bits)
    uint8_t scales[12];       // 16 packed 6-bit scales (offset 32)
    uint16_t d;               // f16 super-block scale
};

struct BlockQ4_K {
    uint16_t d;                    // f16 scale of the scales
    uint16_t dmin;                 // f16 scale of the mins
    uint8_t scales[K_SCALE_SIZE];  // 8 scales + 8 mins, 6 bits each
    uint8_t qs[QK_K / 2];          // 4-bit planes
};

struct BlockQ5_K {
    uint16_t d;                    // f16 scale of the scales
    uint16_t dmin;                 // f16 scale of the mins
    uint8_t scales[K_SCALE_SIZE];  // 8 scales + 8 mins, 6 bits each
    uint8_t qh[QK_K / 8];          // 5th bit: element 32*b + l is bit b of qh[l]
    uint8_t qs[QK_K / 2];          // 4-bit planes (low bits)
};

struct BlockQ6_K {
    uint8_t ql[QK_K / 2];      // low 4 bits
    uint8_t qh[QK_K / 4];      // high 2 bits (2-bit planes)
    int8_t scales[QK_K / 16];  // signed 8-bit scales, per 16 elements
    uint16_t d;                // f16 super-block scale
};

struct BlockQ8_K {
    float d;  // f32 scale
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];  // sums of qs per 16 elements
};

inline constexpr int kG8Blocks = 8;
inline constexpr int kG8Block[kG8Blocks] = {0, 2, 4, 6, 1, 3, 5, 7};  // slot -> block
inline constexpr int kG8Slot[kG8Blocks] = {0, 4, 1, 5, 2, 6, 3, 7};   // block -> slot

struct BlockQ4_0G8 {
    uint16_t d[kG8Blocks];  // f16, slot order
    uint8_t qs[kG8Blocks * QK4_0 / 2];
};

struct BlockQ8_0G8 {
    float d[kG8Blocks];    // slot order
    int32_t s[kG8Blocks];  // slot order
    int8_t qs[kG8Blocks * QK8_0];
};

struct BlockQ8_0G8W {
    uint16_t d[kG8Blocks];  // f16, slot order
    uint8_t qs[kG8Blocks * QK8_0];  // q + 128, pair order
};

static_assert(sizeof(BlockQ8_0G8W) == 8 * sizeof(BlockQ8_0));

// Where elements 0..15 (half 0) and 16..31 (half 1) of block b sit in the quants of a Q8_0_G8 or
// Q8_0_G8W group (their pair order).
constexpr int g8_pair_offset(int b, int half) {
    return (b / 2) * 64 + half * 32 + (b % 2) * 16;
}
// Where element e of a 256-element block sits in lane order (see above); its own inverse.
constexpr int lane_position(int e) {
    return 32 * ((e % 32) / 4) + 4 * (e / 32) + e % 4;
}
static_assert(lane_position(lane_position(77)) == 77 && lane_position(6) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_0G8) == 8 * sizeof(BlockQ4_0));
static_assert(sizeof(BlockQ8_0G8) == 320);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace syslm::kernels
