// The flash-attention kernel's body (attention.h), one text for two compilers like
// quant_kernels.h: NVRTC compiles it (CMake embeds it as kAttentionKernelsSource;
// attention_source.cpp writes the extern "C" entry; tensor_core.h's text comes first), and the host
// tests run the same template on an emulated grid, a fiber per CUDA thread
// (tests/gpu/kernel_emulator.h), so the tiling, the pipeline and every index are checked without a
// GPU. Under NVRTC the primitives are CUDA's (cp.async, ldmatrix, mma.sync, shuffles); on the host
// they are declared here and defined by the emulator.
//
// A block of 4 warps takes 128 query rows of one (batch, head), 32 rows a warp: each k and v
// fragment read from shared memory feeds two tensor-core products (the 16-row tiles g and
// g + 16). The keys go by in tiles of 64 through two shared stages, tile j + 2's copies in flight
// while tile j is used. Per tile: scores = q kᵀ (mma.sync m16n8k16, f32 accumulators, q's
// fragments read from shared memory with ldmatrix), scaled to base 2; bias, mask and the causal
// cut applied only where the tile needs them (a mask or bias, keys past the end, or the diagonal
// in this warp's rows); the running maximum and sum updated (online softmax, the values rescaled
// only when a maximum moved); the weights rounded to the input type and multiplied into v on the
// tensor cores (ldmatrix transposed). A warp whose
// rows all come before the tile's first key under the causal cut skips it. The [Sq, Sk] matrix
// never exists; a row whose every key is excluded gives zeros, a NaN score a NaN row, as the
// default.
//
// The backward pass (ka_attention with kStats, ka_attention_dq, ka_attention_dkv) recomputes the
// weights from each query row's statistics: blocks of 64 rows, 16 a warp, dq over the key tiles
// and dk, dv over the query tiles, every product through the same two helpers (ka_scores,
// ka_accumulate), the gradients as f32.
//
// Fragment layouts are PTX's for mma.m16n8k16 with 16-bit inputs: lane 4g + t holds A (16 x 16,
// row-major) elements (g, 2t..2t+1), (g + 8, ..), (g, 2t + 8..), (g + 8, 2t + 8..); B (16 x 8)
// elements (2t..2t+1, g), (2t + 8.., g); C (16 x 8, f32) elements (g, 2t..2t+1), (g + 8, ..).
// Two C tiles side by side are, element for element, one A tile: the weights go from the score
// accumulators to the second product without leaving registers.
#ifndef KILN_CUDA_ATTENTION_KERNELS_H
#define KILN_CUDA_ATTENTION_KERNELS_H

#ifdef __CUDACC_RTC__
#define KA_FN __device__ __forceinline__
#define KA_UNROLL _Pragma("unroll")
#else
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backends/cuda/tensor_core.h"
#include "contract/random_stream.h"
#include "kiln/half.h"
#define KA_FN inline
#define KA_UNROLL
#endif

namespace kiln::cuda::attention_kernels {

inline constexpr int kKaRows = 128;  // query rows of a forward block (32 a warp)
inline constexpr int kKaKeys = 64;   // rows of a tile; of a backward block (16 a warp)
inline constexpr int kKaThreads = 128;

// Elements of a shared row: the head dim and 16 bytes, so that the 8 rows an ldmatrix reads
// start in 8 different groups of 4 banks.
KA_FN constexpr int ka_stride(int depth) { return depth + 8; }
// Shared bytes of a block of any of the kernels: 384 rows (the forward pass's q and two stages of
// k and v; the backward's two resident tiles and two stages of two more) and two stages of the
// statistics of 64 query rows.
KA_FN constexpr int ka_shared_bytes(int depth) {
  return (kKaRows + 4 * kKaKeys) * ka_stride(depth) * 2 + 2 * 2 * kKaKeys * 4;
}
// Floats of the backward pass's statistics for `rows` query rows (over every batch and head):
// {L, D} per row.
KA_FN constexpr long long ka_stats_floats(long long rows) { return 2 * rows; }

// The kernel's parameters (the plugin fills them; cuda_attention.cpp).
struct KaParams {
  unsigned long long q, k, v, out, mask, bias;  // mask, bias: 0 when absent
  // The backward pass's: dO (contiguous [B, H, Sq, KD], the input type; out is the forward's
  // output there), the statistics ({L, D} per query row, f32), and the gradients (f32,
  // contiguous [B, H, S, KD]).
  unsigned long long grad, stats, dq, dk, dv;
  // Element strides over (batch, head, row) of q, k and v (the last dim is contiguous), and over
  // (batch, head, query, key) of mask and bias; 0 along a broadcast dim.
  long long q_strides[3], k_strides[3], v_strides[3];
  long long mask_strides[4], bias_strides[4];
  long long batch, heads, queries, keys, query_blocks;
  float scale_log2;  // the scale times log2(e)
  float scale;
  int causal;
  // Dropout (the kDropout bodies; contract/attention_dropout.h): the seed operand (one I64 on the
  // device), the threshold the 24 bits of each weight's hash are kept from, and the kept ones'
  // factor 1 / (1 - p).
  unsigned long long dropout_seed;
  unsigned dropout_threshold;
  float dropout_scale;
};

// ---- the primitives ----
#ifdef __CUDACC_RTC__
KA_FN unsigned ka_thread() { return threadIdx.x; }
KA_FN unsigned ka_block() { return blockIdx.x; }
KA_FN void ka_sync() { __syncthreads(); }
// 16 bytes from global to shared memory, or 16 zero bytes when !valid (nothing is read then).
KA_FN void ka_copy16(unsigned short* dst, const unsigned short* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   static_cast<unsigned>(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(valid ? 16 : 0));
}
// 8 bytes likewise (through L1: cp.async.cg takes only 16).
KA_FN void ka_copy8(float* dst, const float* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(
                   static_cast<unsigned>(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(valid ? 8 : 0));
}
KA_FN void ka_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Every group of copies but the newest kPending has landed (this thread's copies).
template <int kPending>
KA_FN void ka_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
// A byte address in shared memory: each lane's fragment rows are found from one base and the
// tile's constant offsets, which the instruction takes as immediates.
typedef unsigned KaShared;
KA_FN KaShared ka_shared(const unsigned short* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// Four 8x8 tiles of 16-bit values; lanes 8i..8i+7 give the row addresses of tile i, and lane
// 4r + c receives row r, columns 2c and 2c + 1 of each (of each transposed, for ka_ldsm_t).
KA_FN void ka_ldsm(unsigned* r, KaShared at) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}
KA_FN void ka_ldsm_t(unsigned* r, KaShared at) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}
// lo in the low half, hi in the high half, each rounded to nearest even.
template <bool kBf16>
KA_FN unsigned ka_pack(float lo, float hi) {
  unsigned r;
  if constexpr (kBf16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}
template <bool kBf16>
KA_FN float ka_to_float(unsigned short bits) {
  if constexpr (kBf16) {
    return __uint_as_float(static_cast<unsigned>(bits) << 16);
  } else {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
  }
}
KA_FN float ka_shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
KA_FN bool ka_any(bool v) { return __any_sync(0xffffffffu, v); }
KA_FN float ka_fmax(float a, float b) { return fmaxf(a, b); }
KA_FN float ka_fma(float a, float b, float c) { return fmaf(a, b, c); }
// 2^x, to 2 ulp; -inf gives 0.
KA_FN float ka_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
KA_FN float ka_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
KA_FN float ka_neg_inf() { return __int_as_float(0xff800000); }
// SplitMix64's finaliser, contract/random_stream.h's mix64 (the host's below).
KA_FN unsigned long long ka_mix64(unsigned long long x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
#else
unsigned ka_thread();
unsigned ka_block();
void ka_sync();
void ka_copy16(unsigned short* dst, const unsigned short* src, bool valid);
void ka_copy8(float* dst, const float* src, bool valid);
void ka_commit();
void ka_wait_host(int pending);
template <int kPending>
inline void ka_wait() {
  ka_wait_host(kPending);
}
typedef std::uintptr_t KaShared;
inline KaShared ka_shared(const unsigned short* p) { return reinterpret_cast<std::uintptr_t>(p); }
void ka_ldsm(unsigned* r, KaShared at);
void ka_ldsm_t(unsigned* r, KaShared at);
template <bool kBf16>
inline unsigned ka_pack(float lo, float hi) {
  if constexpr (kBf16) return float_to_bf16_bits(lo) | unsigned{float_to_bf16_bits(hi)} << 16;
  return float_to_f16_bits(lo) | unsigned{float_to_f16_bits(hi)} << 16;
}
template <bool kBf16>
inline float ka_to_float(unsigned short bits) {
  return kBf16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits);
}
float ka_shfl_xor(float v, int mask);
bool ka_any(bool v);
inline float ka_fmax(float a, float b) { return std::fmax(a, b); }
inline float ka_fma(float a, float b, float c) { return std::fma(a, b, c); }
inline float ka_exp2(float x) { return std::exp2(x); }
inline float ka_log2(float x) { return std::log2(x); }
inline float ka_neg_inf() { return -std::numeric_limits<float>::infinity(); }
inline unsigned long long ka_mix64(unsigned long long x) { return mix64(x); }
#endif

// Accumulators of kM x 16 rows by N C tiles (the mma.m16n8 layout), zeroed.
template <int kM, int N>
KA_FN void ka_zero(float (&acc)[kM][N][4]) {
  KA_UNROLL for (int mi = 0; mi < kM; ++mi) {
    KA_UNROLL for (int n = 0; n < N; ++n) acc[mi][n][0] = acc[mi][n][1] = acc[mi][n][2] =
        acc[mi][n][3] = 0.f;
  }
}

// Rows [row0, row0 + kTileRows) of a [rows, KD] operand (row stride `stride` elements) into a
// shared tile; rows past `rows` are zeros.
template <int KD, int kTileRows>
KA_FN void ka_load_tile(unsigned short* dst, const unsigned short* src, long long stride,
                        long long row0, long long rows) {
  constexpr int kChunks = KD / 8;  // 16-byte pieces of a row
  for (int c = static_cast<int>(ka_thread()); c < kTileRows * kChunks; c += kKaThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = row0 + r < rows;
    ka_copy16(dst + r * ka_stride(KD) + col, valid ? src + (row0 + r) * stride + col : src, valid);
  }
}

// Scores of a warp's 16 kM rows (A, rows of a shared tile from a_rows) against the 64 rows of
// another (B, from b_rows), both [rows, KD]: s = A Bᵀ. q kᵀ in the forward pass; q kᵀ and
// dO vᵀ for dq, k qᵀ and v dOᵀ for dk and dv.
template <int KD, bool kBf16, int kM>
KA_FN void ka_scores(float (&s)[kM][kKaKeys / 8][4], const unsigned short* a_rows,
                     const unsigned short* b_rows, int lane) {
  constexpr int kStride = ka_stride(KD);
  ka_zero(s);
  // A fragments: lanes 0-15 address rows 0-15 at dims kk*16.., lanes 16-31 the same rows at
  // kk*16+8... B fragments for two tiles of 8 rows at once: lanes 0-7 address rows n*8.. at dims
  // kk*16.., lanes 8-15 the same rows at kk*16+8.., lanes 16-31 the next 8 rows.
  const KaShared a_lane = ka_shared(a_rows + (lane & 15) * kStride + (lane >> 4) * 8);
  const KaShared b_lane =
      ka_shared(b_rows + ((lane >> 4) * 8 + (lane & 7)) * kStride + ((lane >> 3) & 1) * 8);
  KA_UNROLL for (int kk = 0; kk < KD / 16; ++kk) {
    unsigned a[kM][4];
    KA_UNROLL for (int mi = 0; mi < kM; ++mi) {
      ka_ldsm(a[mi], a_lane + 2 * (16 * mi * kStride + kk * 16));
    }
    KA_UNROLL for (int n = 0; n < kKaKeys / 8; n += 2) {
      unsigned f[4];
      ka_ldsm(f, b_lane + 2 * (n * 8 * kStride + kk * 16));
      KA_UNROLL for (int mi = 0; mi < kM; ++mi) {
        tensor_core::tc_mma<kBf16>(s[mi][n], a[mi], f[0], f[1]);
        tensor_core::tc_mma<kBf16>(s[mi][n + 1], a[mi], f[2], f[3]);
      }
    }
  }
}

// acc += W B: W the warp's [16 kM, 64] weights in registers (s's layout, rounded to the input
// type), B the 64 rows of a shared [64, KD] tile (ldmatrix transposed). The weights meet v in the
// forward pass; dS meets k for dq; Pᵀ meets dO and dSᵀ meets q for dv and dk.
template <int KD, bool kBf16, int kM>
KA_FN void ka_accumulate(float (&acc)[kM][KD / 8][4], const float (&w)[kM][kKaKeys / 8][4],
                         const unsigned short* b_rows, int lane) {
  constexpr int kStride = ka_stride(KD);
  // B fragments for two tiles of 8 dims at once: lanes 0-7 address rows kk*16.. at dims d*8..,
  // lanes 8-15 rows kk*16+8.., lanes 16-31 the same rows at dims (d+1)*8...
  const KaShared b_lane =
      ka_shared(b_rows + (((lane >> 3) & 1) * 8 + (lane & 7)) * kStride + (lane >> 4) * 8);
  KA_UNROLL for (int kk = 0; kk < kKaKeys / 16; ++kk) {
    unsigned a[kM][4];
    KA_UNROLL for (int mi = 0; mi < kM; ++mi) {
      a[mi][0] = ka_pack<kBf16>(w[mi][2 * kk][0], w[mi][2 * kk][1]);
      a[mi][1] = ka_pack<kBf16>(w[mi][2 * kk][2], w[mi][2 * kk][3]);
      a[mi][2] = ka_pack<kBf16>(w[mi][2 * kk + 1][0], w[mi][2 * kk + 1][1]);
      a[mi][3] = ka_pack<kBf16>(w[mi][2 * kk + 1][2], w[mi][2 * kk + 1][3]);
    }
    KA_UNROLL for (int d = 0; d < KD / 8; d += 2) {
      unsigned f[4];
      ka_ldsm_t(f, b_lane + 2 * (kk * 16 * kStride + d * 8));
      KA_UNROLL for (int mi = 0; mi < kM; ++mi) {
        tensor_core::tc_mma<kBf16>(acc[mi][d], a[mi], f[0], f[1]);
        tensor_core::tc_mma<kBf16>(acc[mi][d + 1], a[mi], f[2], f[3]);
      }
    }
  }
}

// The tile of scores s (rows: the warp's 16 kM queries from first_query, columns: 64 keys from
// k0; kTransposed: rows are the warp's keys from first_key = k0 and columns 64 queries from q0)
// in base 2, the bias added and the excluded ones -inf: keys or queries past the end, keys after
// their query under the causal cut, masked ones. Each element is checked only on a tile that needs
// it (`checked`); without a mask or bias the checks are on offsets within the tile. Returns the
// factor s must still be multiplied by: a tile that needs no check is left as the products gave
// it, and its positive scale (which keeps the order of the scores, so maxima may be taken first)
// joins the exponent's subtraction in one fused multiply-add.
template <bool kBf16, bool kMask, bool kBias, int kM, bool kTransposed, int kColumns = kKaKeys>
KA_FN float ka_prepare_scores(float (&s)[kM][kColumns / 8][4], const KaParams& p, bool checked,
                              long long b, long long h, long long row0, long long column0,
                              int lane) {
  if (!checked && p.scale_log2 > 0.f) return p.scale_log2;
  const int g = lane >> 2, t = lane & 3;
  const float neg_inf = ka_neg_inf();
  const long long query0 = kTransposed ? column0 : row0, key0 = kTransposed ? row0 : column0;
  // Elements (row r, column c) are (query r, key c), or (key r, query c) transposed; the key is
  // after the query where key - query = (key0 - query0) + (c - r) (transposed: r - c) > 0.
  const long long queries_left = p.queries - query0, keys_left = p.keys - key0;
  const long long gap = key0 - query0;
  const int rows_left = static_cast<int>((kTransposed ? keys_left : queries_left) < 64
                                             ? (kTransposed ? keys_left : queries_left)
                                             : 64);
  const int columns_left = static_cast<int>((kTransposed ? queries_left : keys_left) < kColumns
                                                ? (kTransposed ? queries_left : keys_left)
                                                : kColumns);
  // Clamped to where it decides nothing more: key - query ranges over gap +- kColumns (the
  // tile's rows are at most 64).
  constexpr int kSpan = 2 * kColumns;
  const int after =
      !p.causal || gap < -kSpan ? -2 * kSpan : (gap > kSpan ? 2 * kSpan : static_cast<int>(gap));
  KA_UNROLL for (int mi = 0; mi < kM; ++mi) {
    KA_UNROLL for (int n = 0; n < kColumns / 8; ++n) {
      KA_UNROLL for (int c = 0; c < 4; ++c) {
        const int row = 16 * mi + g + (c >> 1) * 8, column = n * 8 + 2 * t + (c & 1);
        float x = s[mi][n][c] * p.scale_log2;
        const int key_minus_query = after + (kTransposed ? row - column : column - row);
        // Keys past the end and (transposed) queries past the end are excluded; queries past the
        // end (rows, not transposed) are computed and never stored.
        bool excluded =
            column >= columns_left || (kTransposed && row >= rows_left) || key_minus_query > 0;
        if constexpr (kMask || kBias) {
          const long long qi = query0 + (kTransposed ? column : row);
          const long long kj = key0 + (kTransposed ? row : column);
          if (!excluded && qi < p.queries) {
            if constexpr (kMask) {
              excluded = reinterpret_cast<const unsigned char*>(
                             p.mask)[b * p.mask_strides[0] + h * p.mask_strides[1] +
                                     qi * p.mask_strides[2] + kj * p.mask_strides[3]] != 0;
            }
            if constexpr (kBias) {
              x += ka_to_float<kBf16>(reinterpret_cast<const unsigned short*>(
                       p.bias)[b * p.bias_strides[0] + h * p.bias_strides[1] +
                               qi * p.bias_strides[2] + kj * p.bias_strides[3]]) *
                   1.4426950408889634f;
            }
          }
        }
        s[mi][n][c] = excluded ? neg_inf : x;
      }
    }
  }
  return 1.f;
}

// Whether dropout keeps score (query qi, key kj) of head bh: mix64(key ^ ((bh * queries + qi) *
// keys + kj)) >> 40 >= the threshold, key = mix64(seed) (contract/attention_dropout.h).
KA_FN bool ka_dropout_keeps(const KaParams& p, unsigned long long key, long long bh, long long qi,
                            long long kj) {
  const auto index =
      (static_cast<unsigned long long>(bh) * static_cast<unsigned long long>(p.queries) +
       static_cast<unsigned long long>(qi)) *
          static_cast<unsigned long long>(p.keys) +
      static_cast<unsigned long long>(kj);
  return (ka_mix64(key ^ index) >> 40) >= p.dropout_threshold;
}

// Which of this lane's elements of a tile of scores (laid out as ka_prepare_scores' s) dropout
// keeps (ka_dropout_keeps), bit (mi * kColumns / 8 + n) * 4 + c for s[mi][n][c]. Elements past
// the ends get some bit; they weigh 0.
template <int kM, bool kTransposed, int kColumns = kKaKeys>
KA_FN unsigned long long ka_dropout_kept(const KaParams& p, unsigned long long key, long long bh,
                                         long long row0, long long column0, int lane) {
  static_assert(kM * kColumns / 2 <= 64, "one bit an element");
  const int g = lane >> 2, t = lane & 3;
  unsigned long long kept = 0;
  KA_UNROLL for (int mi = 0; mi < kM; ++mi) {
    KA_UNROLL for (int n = 0; n < kColumns / 8; ++n) {
      KA_UNROLL for (int c = 0; c < 4; ++c) {
        const long long row = row0 + 16 * mi + g + (c >> 1) * 8;
        const long long column = column0 + n * 8 + 2 * t + (c & 1);
        const bool keeps = kTransposed ? ka_dropout_keeps(p, key, bh, column, row)
                                       : ka_dropout_keeps(p, key, bh, row, column);
        if (keeps) kept |= 1ull << ((mi * (kColumns / 8) + n) * 4 + c);
      }
    }
  }
  return kept;
}

// dropout's factor for element (mi, n, c) of a tile whose kept bits are `kept`.
template <int kColumns = kKaKeys>
KA_FN float ka_dropout_factor(const KaParams& p, unsigned long long kept, int mi, int n, int c) {
  return (kept >> ((mi * (kColumns / 8) + n) * 4 + c)) & 1ull ? p.dropout_scale : 0.f;
}

// s times dropout's factor, element by element, for a tile whose kept bits are `kept`.
template <int kM, int kColumns = kKaKeys>
KA_FN void ka_drop(float (&s)[kM][kColumns / 8][4], const KaParams& p, unsigned long long kept) {
  KA_UNROLL for (int mi = 0; mi < kM; ++mi) {
    KA_UNROLL for (int n = 0; n < kColumns / 8; ++n) {
      KA_UNROLL for (int c = 0; c < 4; ++c) {
        s[mi][n][c] *= ka_dropout_factor<kColumns>(p, kept, mi, n, c);
      }
    }
  }
}

// The key of the dropout hash: mix64 of the seed operand.
KA_FN unsigned long long ka_dropout_key(const KaParams& p) {
  return ka_mix64(*reinterpret_cast<const unsigned long long*>(p.dropout_seed));
}

// The sum over the four lanes of a quad (the lanes that hold one row of a C tile).
KA_FN float ka_quad_sum(float x) {
  x += ka_shfl_xor(x, 1);
  return x + ka_shfl_xor(x, 2);
}

template <int KD, int kM = 2>
struct KaWarpState {
  float o[kM][KD / 8][4];  // the weighted sums of v, unnormalised, of kM x 16 rows
  float m[kM][2];          // the running maxima of rows g and g + 8 of each 16 (base 2)
  float l[kM][2];          // and the sums of their weights (this lane's columns only)
};

// A warp's state before its first tile: no values, every maximum -inf, every sum 0.
template <int KD, int kM>
KA_FN void ka_start(KaWarpState<KD, kM>& w) {
  ka_zero(w.o);
  KA_UNROLL for (int mi = 0; mi < kM; ++mi) {
    w.m[mi][0] = w.m[mi][1] = ka_neg_inf();
    w.l[mi][0] = w.l[mi][1] = 0.f;
  }
}

// The online softmax: each row's maximum over the tile (the quad's four lanes hold its
// columns), and s made the weights 2^(s factor - max) (factor: ka_prepare_scores'). The maxima
// leave NaN scores out (fmax), but a NaN score's weight is NaN, and so are its row's sum and
// output, as the default's softmax gives. A row whose maximum is still -inf has had every key
// excluded (or NaN): its weights are taken against 0, so that excluded keys weigh 0, NaN ones NaN.
// The running maxima and sums move to the tile; `rescale` gets the factor the values accumulated
// so far must be multiplied by (ka_rescale), and the result says whether any of this lane's rows
// has a new maximum.
template <int kM, int kColumns>
KA_FN bool ka_softmax_weights(float (&s)[kM][kColumns / 8][4], float (&m)[kM][2], float (&l)[kM][2],
                              float factor, float (&rescale)[kM][2]) {
  const float neg_inf = ka_neg_inf();
  bool changed = false;
  KA_UNROLL for (int mi = 0; mi < kM; ++mi) {
    KA_UNROLL for (int r = 0; r < 2; ++r) {
      float tile_max = neg_inf;
      KA_UNROLL for (int n = 0; n < kColumns / 8; ++n) {
        tile_max = ka_fmax(tile_max, ka_fmax(s[mi][n][2 * r], s[mi][n][2 * r + 1]));
      }
      tile_max = ka_fmax(tile_max, ka_shfl_xor(tile_max, 1));
      tile_max = ka_fmax(tile_max, ka_shfl_xor(tile_max, 2));
      const float next = ka_fmax(m[mi][r], tile_max * factor);
      const float base = next == neg_inf ? 0.f : next;
      rescale[mi][r] = ka_exp2(m[mi][r] - base);
      changed = changed || next != m[mi][r];
      m[mi][r] = next;
      float sum = l[mi][r] * rescale[mi][r];
      KA_UNROLL for (int n = 0; n < kColumns / 8; ++n) {
        KA_UNROLL for (int e = 0; e < 2; ++e) {
          const float weight = ka_exp2(ka_fma(s[mi][n][2 * r + e], factor, -base));
          s[mi][n][2 * r + e] = weight;
          sum += weight;
        }
      }
      l[mi][r] = sum;
    }
  }
  return changed;
}

// The accumulated values rescaled to the rows' new maxima, when a row of the warp has one (every
// lane of the warp calls it).
template <int KD, int kM>
KA_FN void ka_rescale(float (&o)[kM][KD / 8][4], const float (&rescale)[kM][2], bool changed) {
  if (!ka_any(changed)) return;
  KA_UNROLL for (int mi = 0; mi < kM; ++mi) {
    KA_UNROLL for (int d = 0; d < KD / 8; ++d) {
      KA_UNROLL for (int c = 0; c < 4; ++c) o[mi][d][c] *= rescale[mi][c >> 1];
    }
  }
}

// One step of the online softmax over a tile (ka_softmax_weights), the values rescaled (never
// without kValues: the statistics alone).
template <int KD, bool kValues, int kM = 2, int kColumns = kKaKeys>
KA_FN void ka_softmax_step(float (&s)[kM][kColumns / 8][4], KaWarpState<KD, kM>& w, float factor) {
  float rescale[kM][2];
  const bool changed = ka_softmax_weights<kM, kColumns>(s, w.m, w.l, factor, rescale);
  if (kValues) ka_rescale<KD, kM>(w.o, rescale, changed);
}

// L of the block's rows (ka_store_stats) at p.stats, the first float of each row's pair.
template <int KD, int kM>
KA_FN void ka_store_lse(KaWarpState<KD, kM>& w, const KaParams& p, long long bh,
                        long long first_row, int lane) {
  const int g = lane >> 2, t = lane & 3;
  float* stats = reinterpret_cast<float*>(p.stats) + 2 * bh * p.queries;
  KA_UNROLL for (int mi = 0; mi < kM; ++mi) {
    KA_UNROLL for (int r = 0; r < 2; ++r) {
      const float sum = ka_quad_sum(w.l[mi][r]);
      const long long qi = first_row + 16 * mi + g + r * 8;
      if (t == 0 && qi < p.queries) {
        stats[2 * qi] = sum == 0.f ? -ka_neg_inf() : w.m[mi][r] + ka_log2(sum);
      }
    }
  }
}

// The block's rows divided by their sums, rounded to the input type; rows with every key
// excluded (sum 0) give zeros, rows past the end nothing. With p.stats, L of each row too
// (ka_store_lse), which spares the backward pass its statistics' scores (ka_attention_delta).
template <int KD, bool kBf16, int kM = 2>
KA_FN void ka_store(KaWarpState<KD, kM>& w, const KaParams& p, long long bh, long long first_row,
                    int lane) {
  if (p.stats != 0) ka_store_lse<KD, kM>(w, p, bh, first_row, lane);
  const int g = lane >> 2, t = lane & 3;
  unsigned short* out = reinterpret_cast<unsigned short*>(p.out) + bh * p.queries * KD;
  KA_UNROLL for (int mi = 0; mi < kM; ++mi) {
    KA_UNROLL for (int r = 0; r < 2; ++r) {
      const float sum = ka_quad_sum(w.l[mi][r]);
      const long long qi = first_row + 16 * mi + g + r * 8;
      if (qi >= p.queries) continue;
      const float inverse = sum == 0.f ? 0.f : 1.f / sum;
      unsigned* row = reinterpret_cast<unsigned*>(out + qi * KD);
      KA_UNROLL for (int d = 0; d < KD / 8; ++d) {
        row[d * 4 + t] =
            ka_pack<kBf16>(w.o[mi][d][2 * r] * inverse, w.o[mi][d][2 * r + 1] * inverse);
      }
    }
  }
}

// Part of D (ka_store_stats) of a row of out and dO (over every batch and head): the pairs of
// the head dim first, first + step, ... .
template <int KD, bool kBf16>
KA_FN float ka_row_delta(const KaParams& p, long long row, int first, int step) {
  const auto* out = reinterpret_cast<const unsigned*>(p.out) + row * (KD / 2);
  const auto* grad = reinterpret_cast<const unsigned*>(p.grad) + row * (KD / 2);
  float dot = 0.f;
  for (int d = first; d < KD / 2; d += step) {
    const unsigned o2 = out[d], g2 = grad[d];
    dot += ka_to_float<kBf16>(static_cast<unsigned short>(o2 & 0xFFFF)) *
               ka_to_float<kBf16>(static_cast<unsigned short>(g2 & 0xFFFF)) +
           ka_to_float<kBf16>(static_cast<unsigned short>(o2 >> 16)) *
               ka_to_float<kBf16>(static_cast<unsigned short>(g2 >> 16));
  }
  return dot;
}

// The backward pass's statistics of the block's rows, {L, D} per row at p.stats: L the base-2
// log of the sum of the row's weights, 2^(s - L) its softmax (+inf where every key is excluded,
// so that every weight is 0), and D = Σ dO · out over the head dim (p.grad, p.out: contiguous
// [B, H, Sq, KD]), which the backward kernels subtract from dP. A lane a row.
template <int KD, bool kBf16, int kM = 2>
KA_FN void ka_store_stats(KaWarpState<KD, kM>& w, const KaParams& p, long long bh,
                          long long first_row, int lane) {
  ka_store_lse<KD, kM>(w, p, bh, first_row, lane);
  const long long qi = first_row + lane;
  if (lane >= 16 * kM || qi >= p.queries) return;
  const long long row = bh * p.queries + qi;
  reinterpret_cast<float*>(p.stats)[2 * row + 1] = ka_row_delta<KD, kBf16>(p, row, 0, 1);
}

// Where a thread of a block stands: its warp and lane, the block's (batch, head) bh and its index
// along that head's rows (blocks of the same index of every head are neighbours in the grid), and
// that head's operands: q, k and v at their first rows, and dO's (contiguous).
struct KaHead {
  int warp, lane;
  long long bh, tile, b, h;
  const unsigned short *q, *k, *v, *grad;
};
template <int KD>
KA_FN KaHead ka_head(const KaParams& p) {
  KaHead head;
  head.warp = static_cast<int>(ka_thread()) >> 5;
  head.lane = static_cast<int>(ka_thread()) & 31;
  const long long heads_total = p.batch * p.heads, bh = ka_block() % heads_total;
  head.bh = bh;
  head.tile = ka_block() / heads_total;
  head.b = bh / p.heads;
  head.h = bh % p.heads;
  head.q = reinterpret_cast<const unsigned short*>(p.q) + head.b * p.q_strides[0] +
           head.h * p.q_strides[1];
  head.k = reinterpret_cast<const unsigned short*>(p.k) + head.b * p.k_strides[0] +
           head.h * p.k_strides[1];
  head.v = reinterpret_cast<const unsigned short*>(p.v) + head.b * p.v_strides[0] +
           head.h * p.v_strides[1];
  head.grad = p.grad == 0 ? nullptr  // the forward pass has none
                          : reinterpret_cast<const unsigned short*>(p.grad) + bh * p.queries * KD;
  return head;
}

// D of each query row (ka_store_stats) into the statistics where the forward pass wrote L
// (ka_store with p.stats): the backward pass's statistics without their scores. A warp a row,
// kKaThreads / 32 rows a block; mask and bias play no part (the entry's common parameters).
template <int KD, bool kBf16, bool kMask, bool kBias>
KA_FN void ka_attention_delta(const KaParams& p, unsigned short*) {
  const long long heads_total = p.batch * p.heads, bh = ka_block() % heads_total;
  const long long qi = ka_block() / heads_total * (kKaThreads / 32) + ka_thread() / 32;
  const int lane = static_cast<int>(ka_thread()) & 31;
  if (qi >= p.queries) return;  // the warp's every lane
  const long long row = bh * p.queries + qi;
  float dot = ka_row_delta<KD, kBf16>(p, row, lane, 32);
  KA_UNROLL for (int mask = 16; mask > 0; mask >>= 1) dot += ka_shfl_xor(dot, mask);
  if (lane == 0) reinterpret_cast<float*>(p.stats)[2 * row + 1] = dot;
}

// One block of the forward pass (kStats: of the backward pass's statistics, ka_store_stats, with
// no values read): query rows [q0, q0 + 128) of (batch, head) bh, the last query blocks first
// (under a causal cut they have the most keys to walk). smem: ka_shared_bytes(KD), 16-byte
// aligned.
template <int KD, bool kBf16, bool kMask, bool kBias, bool kStats, bool kDropout = false>
KA_FN void ka_attention(const KaParams& p, unsigned short* smem) {
  constexpr int kStride = ka_stride(KD), kTile = kKaKeys * kStride;
  unsigned short* q_tile = smem;
  unsigned short* k_tiles = smem + kKaRows * kStride;  // two stages
  unsigned short* v_tiles = k_tiles + 2 * kTile;
  const KaHead head = ka_head<KD>(p);
  const int warp = head.warp, lane = head.lane;
  const long long bh = head.bh, b = head.b, h = head.h;
  const unsigned short *Q = head.q, *K = head.k, *V = head.v;
  const long long q0 = (p.query_blocks - 1 - head.tile) * kKaRows;
  const long long first_row = q0 + warp * 32;  // this warp's rows: first_row .. first_row + 31

  long long key_end = p.keys;
  if (p.causal && q0 + kKaRows < key_end) key_end = q0 + kKaRows;  // keys after the last query
  const int key_tiles = static_cast<int>((key_end + kKaKeys - 1) / kKaKeys);

  // Groups of copies, one committed per step whether or not it holds any (so that "all but the
  // newest" always means the same tile): q with tile 0, tile 1, then tile j + 2 after step j.
  ka_load_tile<KD, kKaRows>(q_tile, Q, p.q_strides[2], q0, p.queries);
  for (int j = 0; j < 2; ++j) {
    if (j < key_tiles) {
      ka_load_tile<KD, kKaKeys>(k_tiles + j * kTile, K, p.k_strides[2], j * kKaKeys, p.keys);
      if (!kStats) {
        ka_load_tile<KD, kKaKeys>(v_tiles + j * kTile, V, p.v_strides[2], j * kKaKeys, p.keys);
      }
    }
    ka_commit();
  }

  KaWarpState<KD> w;
  ka_start(w);
  unsigned long long dropout_key = 0;
  if constexpr (kDropout) dropout_key = ka_dropout_key(p);
  for (int j = 0; j < key_tiles; ++j) {
    ka_wait<1>();  // this thread's copies of tile j are in
    ka_sync();     // and every thread's
    const long long k0 = static_cast<long long>(j) * kKaKeys;
    // Under the causal cut a warp whose last row comes before the tile's first key has nothing
    // to add from it.
    if (!p.causal || k0 <= first_row + 31) {
      float s[2][kKaKeys / 8][4];
      ka_scores<KD, kBf16, 2>(s, q_tile + warp * 32 * kStride, k_tiles + (j & 1) * kTile, lane);
      const bool checked =
          kMask || kBias || k0 + kKaKeys > p.keys || (p.causal && k0 + kKaKeys - 1 > first_row);
      const float factor = ka_prepare_scores<kBf16, kMask, kBias, 2, false>(s, p, checked, b, h,
                                                                            first_row, k0, lane);
      ka_softmax_step<KD, !kStats>(s, w, factor);
      if constexpr (kDropout && !kStats) {
        // The sums keep every weight (they divide the output); the values take the kept ones.
        ka_drop<2>(s, p, ka_dropout_kept<2, false>(p, dropout_key, bh, first_row, k0, lane));
      }
      if (!kStats) ka_accumulate<KD, kBf16, 2>(w.o, s, v_tiles + (j & 1) * kTile, lane);
    }
    ka_sync();  // every warp is done with stage j & 1
    if (j + 2 < key_tiles) {
      ka_load_tile<KD, kKaKeys>(k_tiles + (j & 1) * kTile, K, p.k_strides[2], k0 + 2 * kKaKeys,
                                p.keys);
      if (!kStats) {
        ka_load_tile<KD, kKaKeys>(v_tiles + (j & 1) * kTile, V, p.v_strides[2], k0 + 2 * kKaKeys,
                                  p.keys);
      }
    }
    ka_commit();
  }
  if (kStats) {
    ka_store_stats<KD, kBf16>(w, p, bh, first_row, lane);
  } else {
    ka_store<KD, kBf16>(w, p, bh, first_row, lane);
  }
}

// The backward pass's statistics staged for a tile of 64 queries: {L, D} of each, 512 bytes;
// rows past the end zeros (their columns are excluded: 2^(-inf - 0) weighs 0).
template <int kRows, int kThreads = kKaThreads>
KA_FN void ka_load_stats(float* dst, const float* stats, long long row0, long long rows) {
  for (int r = static_cast<int>(ka_thread()); r < kRows; r += kThreads) {
    const bool valid = row0 + r < rows;
    ka_copy8(dst + 2 * r, valid ? stats + 2 * (row0 + r) : stats, valid);
  }
}

// L and D (ka_store_stats) of this lane's rows g and g + 8 of the warp's 16 from first_row; rows
// past the end weigh nothing (L = +inf).
KA_FN void ka_row_stats(const KaParams& p, long long bh, long long first_row, int lane,
                        float (&L)[2], float (&D)[2]) {
  const float* stats = reinterpret_cast<const float*>(p.stats) + 2 * bh * p.queries;
  KA_UNROLL for (int r = 0; r < 2; ++r) {
    const long long qi = first_row + (lane >> 2) + 8 * r;
    L[r] = qi < p.queries ? stats[2 * qi] : -ka_neg_inf();
    D[r] = qi < p.queries ? stats[2 * qi + 1] : 0.f;
  }
}

// dacc[row][...] = acc * factor as f32 for the warp's 16 rows from first_row that are before
// `rows`: out's rows are KD floats.
template <int KD>
KA_FN void ka_store_f32(const float (&acc)[1][KD / 8][4], float factor, float* out,
                        long long first_row, long long rows, int lane) {
  const int g = lane >> 2, t = lane & 3;
  KA_UNROLL for (int r = 0; r < 2; ++r) {
    const long long row = first_row + g + 8 * r;
    if (row >= rows) continue;
    float* at = out + row * KD + 2 * t;
    KA_UNROLL for (int d = 0; d < KD / 8; ++d) {
      at[d * 8] = acc[0][d][2 * r] * factor;
      at[d * 8 + 1] = acc[0][d][2 * r + 1] * factor;
    }
  }
}

// dk (times the scale) and dv of the warp's 16 keys from first_key, as f32.
template <int KD>
KA_FN void ka_store_key_grads(const float (&dk)[1][KD / 8][4], const float (&dv)[1][KD / 8][4],
                              const KaParams& p, long long bh, long long first_key, int lane) {
  ka_store_f32<KD>(dk, p.scale, reinterpret_cast<float*>(p.dk) + bh * p.keys * KD, first_key,
                   p.keys, lane);
  ka_store_f32<KD>(dv, 1.f, reinterpret_cast<float*>(p.dv) + bh * p.keys * KD, first_key, p.keys,
                   lane);
}

// dq of one block of the backward pass: query rows [q0, q0 + 64) of (batch, head) bh, 16 a warp,
// the last query blocks first. Per tile of 64 keys: the weights P = 2^(s - L) from the scores
// and the statistics (ka_store_stats), dP = dO vᵀ, dS = P (dP - D), dq += dS k; dq scaled by the
// scale at the end, as f32 (p.dq, contiguous [B, H, Sq, KD]). smem as ka_attention's: q and dO's
// 64 rows, two stages of k's and v's.
template <int KD, bool kBf16, bool kMask, bool kBias, bool kDropout = false>
KA_FN void ka_attention_dq(const KaParams& p, unsigned short* smem) {
  constexpr int kStride = ka_stride(KD), kTile = kKaKeys * kStride;
  unsigned short* q_tile = smem;
  unsigned short* g_tile = smem + kTile;
  unsigned short* k_tiles = smem + 2 * kTile;  // two stages
  unsigned short* v_tiles = smem + 4 * kTile;  // two stages
  const KaHead head = ka_head<KD>(p);
  const int warp = head.warp, lane = head.lane;
  const long long bh = head.bh, b = head.b, h = head.h;
  const unsigned short *Q = head.q, *K = head.k, *V = head.v, *G = head.grad;
  const long long q0 = (p.query_blocks - 1 - head.tile) * kKaKeys;
  const long long first_row = q0 + warp * 16;  // this warp's rows: first_row .. first_row + 15

  long long key_end = p.keys;
  if (p.causal && q0 + kKaKeys < key_end) key_end = q0 + kKaKeys;
  const int key_tiles = static_cast<int>((key_end + kKaKeys - 1) / kKaKeys);

  ka_load_tile<KD, kKaKeys>(q_tile, Q, p.q_strides[2], q0, p.queries);
  ka_load_tile<KD, kKaKeys>(g_tile, G, KD, q0, p.queries);
  for (int j = 0; j < 2; ++j) {
    if (j < key_tiles) {
      ka_load_tile<KD, kKaKeys>(k_tiles + j * kTile, K, p.k_strides[2], j * kKaKeys, p.keys);
      ka_load_tile<KD, kKaKeys>(v_tiles + j * kTile, V, p.v_strides[2], j * kKaKeys, p.keys);
    }
    ka_commit();
  }
  float L[2], D[2];
  ka_row_stats(p, bh, first_row, lane, L, D);

  float dq[1][KD / 8][4];
  ka_zero(dq);
  unsigned long long dropout_key = 0;
  if constexpr (kDropout) dropout_key = ka_dropout_key(p);
  for (int j = 0; j < key_tiles; ++j) {
    ka_wait<1>();
    ka_sync();
    const long long k0 = static_cast<long long>(j) * kKaKeys;
    if (!p.causal || k0 <= first_row + 15) {
      const unsigned short* keys = k_tiles + (j & 1) * kTile;
      float s[1][kKaKeys / 8][4], dp[1][kKaKeys / 8][4];
      ka_scores<KD, kBf16, 1>(s, q_tile + warp * 16 * kStride, keys, lane);
      const bool checked =
          kMask || kBias || k0 + kKaKeys > p.keys || (p.causal && k0 + kKaKeys - 1 > first_row);
      const float factor = ka_prepare_scores<kBf16, kMask, kBias, 1, false>(s, p, checked, b, h,
                                                                            first_row, k0, lane);
      ka_scores<KD, kBf16, 1>(dp, g_tile + warp * 16 * kStride, v_tiles + (j & 1) * kTile, lane);
      // With dropout dP is dO vᵀ times the mask's factor (D is unchanged: Σ dO · out).
      if constexpr (kDropout) {
        ka_drop<1>(dp, p, ka_dropout_kept<1, false>(p, dropout_key, bh, first_row, k0, lane));
      }
      KA_UNROLL for (int n = 0; n < kKaKeys / 8; ++n) {
        KA_UNROLL for (int c = 0; c < 4; ++c) {
          s[0][n][c] = ka_exp2(ka_fma(s[0][n][c], factor, -L[c >> 1])) * (dp[0][n][c] - D[c >> 1]);
        }
      }
      ka_accumulate<KD, kBf16, 1>(dq, s, keys, lane);
    }
    ka_sync();
    if (j + 2 < key_tiles) {
      ka_load_tile<KD, kKaKeys>(k_tiles + (j & 1) * kTile, K, p.k_strides[2], k0 + 2 * kKaKeys,
                                p.keys);
      ka_load_tile<KD, kKaKeys>(v_tiles + (j & 1) * kTile, V, p.v_strides[2], k0 + 2 * kKaKeys,
                                p.keys);
    }
    ka_commit();
  }
  ka_store_f32<KD>(dq, p.scale, reinterpret_cast<float*>(p.dq) + bh * p.queries * KD, first_row,
                   p.queries, lane);
}

// dk and dv of one block of the backward pass: keys [k0, k0 + 64) of (batch, head) bh, 16 a warp,
// the first key blocks first (under a causal cut they meet the most queries). Per tile of 64
// queries (from the first that can see the block's keys): the transposed scores k qᵀ and weights
// Pᵀ = 2^(sᵀ - L), dv += Pᵀ dO, dPᵀ = v dOᵀ, dSᵀ = Pᵀ (dPᵀ - D), dk += dSᵀ q; dk scaled by the
// scale at the end; both as f32 (p.dk, p.dv, contiguous [B, H, Sk, KD]). smem: k's and v's 64
// rows, two stages of q's and dO's, then two stages of the queries' statistics (1 KiB).
template <int KD, bool kBf16, bool kMask, bool kBias, bool kDropout = false>
KA_FN void ka_attention_dkv(const KaParams& p, unsigned short* smem) {
  constexpr int kStride = ka_stride(KD), kTile = kKaKeys * kStride;
  unsigned short* k_tile = smem;
  unsigned short* v_tile = smem + kTile;
  unsigned short* q_tiles = smem + 2 * kTile;                      // two stages
  unsigned short* g_tiles = smem + 4 * kTile;                      // two stages
  float* stat_tiles = reinterpret_cast<float*>(smem + 6 * kTile);  // two stages of 64 {L, D}
  const KaHead head = ka_head<KD>(p);
  const int warp = head.warp, lane = head.lane;
  const long long bh = head.bh, b = head.b, h = head.h;
  const unsigned short *Q = head.q, *K = head.k, *V = head.v, *G = head.grad;
  const long long key0 = head.tile * kKaKeys;
  const float* stats = reinterpret_cast<const float*>(p.stats) + 2 * bh * p.queries;
  const long long first_key = key0 + warp * 16;  // this warp's keys: first_key .. first_key + 15

  // Under the causal cut, queries before the block's first key see none of its keys.
  const long long tile0 = p.causal ? key0 / kKaKeys : 0;
  const long long query_tiles = (p.queries + kKaKeys - 1) / kKaKeys;
  const int tiles = static_cast<int>(query_tiles > tile0 ? query_tiles - tile0 : 0);

  ka_load_tile<KD, kKaKeys>(k_tile, K, p.k_strides[2], key0, p.keys);
  ka_load_tile<KD, kKaKeys>(v_tile, V, p.v_strides[2], key0, p.keys);
  for (int j = 0; j < 2; ++j) {
    if (j < tiles) {
      const long long q0 = (tile0 + j) * kKaKeys;
      ka_load_tile<KD, kKaKeys>(q_tiles + j * kTile, Q, p.q_strides[2], q0, p.queries);
      ka_load_tile<KD, kKaKeys>(g_tiles + j * kTile, G, KD, q0, p.queries);
      ka_load_stats<kKaKeys>(stat_tiles + j * 2 * kKaKeys, stats, q0, p.queries);
    }
    ka_commit();
  }

  float dk[1][KD / 8][4], dv[1][KD / 8][4];
  ka_zero(dk);
  ka_zero(dv);
  const int t = lane & 3;
  unsigned long long dropout_key = 0;
  if constexpr (kDropout) dropout_key = ka_dropout_key(p);
  for (int j = 0; j < tiles; ++j) {
    ka_wait<1>();
    ka_sync();
    const long long q0 = (tile0 + j) * kKaKeys;
    // Under the causal cut a warp whose first key comes after the tile's last query skips it.
    if (!p.causal || first_key <= q0 + kKaKeys - 1) {
      const unsigned short* queries = q_tiles + (j & 1) * kTile;
      const unsigned short* grads = g_tiles + (j & 1) * kTile;
      const float* tile_stats = stat_tiles + (j & 1) * 2 * kKaKeys;
      float s[1][kKaKeys / 8][4], dp[1][kKaKeys / 8][4];
      ka_scores<KD, kBf16, 1>(s, k_tile + warp * 16 * kStride, queries, lane);
      const bool checked = kMask || kBias || q0 + kKaKeys > p.queries || first_key + 16 > p.keys ||
                           (p.causal && first_key + 15 > q0);
      const float factor =
          ka_prepare_scores<kBf16, kMask, kBias, 1, true>(s, p, checked, b, h, first_key, q0, lane);
      KA_UNROLL for (int n = 0; n < kKaKeys / 8; ++n) {
        KA_UNROLL for (int c = 0; c < 4; ++c) {
          s[0][n][c] =
              ka_exp2(ka_fma(s[0][n][c], factor, -tile_stats[2 * (n * 8 + 2 * t + (c & 1))]));
        }
      }
      unsigned long long kept = 0;
      if constexpr (kDropout) {
        // dv takes the kept weights (Pᵀ times the mask's factor), dS the kept dP.
        kept = ka_dropout_kept<1, true>(p, dropout_key, bh, first_key, q0, lane);
        float dropped[1][kKaKeys / 8][4];
        KA_UNROLL for (int n = 0; n < kKaKeys / 8; ++n) {
          KA_UNROLL for (int c = 0; c < 4; ++c) dropped[0][n][c] = s[0][n][c];
        }
        ka_drop<1>(dropped, p, kept);
        ka_accumulate<KD, kBf16, 1>(dv, dropped, grads, lane);
      } else {
        ka_accumulate<KD, kBf16, 1>(dv, s, grads, lane);
      }
      ka_scores<KD, kBf16, 1>(dp, v_tile + warp * 16 * kStride, grads, lane);
      if constexpr (kDropout) ka_drop<1>(dp, p, kept);
      KA_UNROLL for (int n = 0; n < kKaKeys / 8; ++n) {
        KA_UNROLL for (int c = 0; c < 4; ++c) {
          s[0][n][c] *= dp[0][n][c] - tile_stats[2 * (n * 8 + 2 * t + (c & 1)) + 1];
        }
      }
      ka_accumulate<KD, kBf16, 1>(dk, s, queries, lane);
    }
    ka_sync();
    if (j + 2 < tiles) {
      const long long next = q0 + 2 * kKaKeys;
      ka_load_tile<KD, kKaKeys>(q_tiles + (j & 1) * kTile, Q, p.q_strides[2], next, p.queries);
      ka_load_tile<KD, kKaKeys>(g_tiles + (j & 1) * kTile, G, KD, next, p.queries);
      ka_load_stats<kKaKeys>(stat_tiles + (j & 1) * 2 * kKaKeys, stats, next, p.queries);
    }
    ka_commit();
  }
  ka_store_key_grads<KD>(dk, dv, p, bh, first_key, lane);
}

}  // namespace kiln::cuda::attention_kernels

#endif  // KILN_CUDA_ATTENTION_KERNELS_H
