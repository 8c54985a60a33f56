// The flash-attention kernel's body (attention.h), one text for two compilers like
// quant_kernels.h: NVRTC compiles it (CMake embeds it as kAttentionKernelsSource;
// attention_source.cpp writes the extern "C" entry; tensor_core.h's text comes first), and the host
// tests run the same template on an emulated grid, a host thread per CUDA thread
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
#include "kiln/half.h"
#define KA_FN inline
#define KA_UNROLL
#endif

namespace kiln::cuda::attention_kernels {

inline constexpr int kKaRows = 128;  // query rows of a block
inline constexpr int kKaKeys = 64;   // keys of a tile
inline constexpr int kKaThreads = 128;

// Elements of a shared row: the head dim and 16 bytes, so that the 8 rows an ldmatrix reads
// start in 8 different groups of 4 banks.
KA_FN constexpr int ka_stride(int depth) { return depth + 8; }
// Shared bytes of a block: q's 128 rows, and two stages of k's and v's 64.
KA_FN constexpr int ka_shared_bytes(int depth) {
  return (kKaRows + 4 * kKaKeys) * ka_stride(depth) * 2;
}

// The kernel's parameters (the plugin fills them; cuda_attention.cpp).
struct KaParams {
  unsigned long long q, k, v, out, mask, bias;  // mask, bias: 0 when absent
  // Element strides over (batch, head, row) of q, k and v (the last dim is contiguous), and over
  // (batch, head, query, key) of mask and bias; 0 along a broadcast dim.
  long long q_strides[3], k_strides[3], v_strides[3];
  long long mask_strides[4], bias_strides[4];
  long long batch, heads, queries, keys, query_blocks;
  float scale_log2;  // the scale times log2(e)
  int causal;
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
// 2^x, to 2 ulp; -inf gives 0.
KA_FN float ka_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
KA_FN float ka_neg_inf() { return __int_as_float(0xff800000); }
#else
unsigned ka_thread();
unsigned ka_block();
void ka_sync();
void ka_copy16(unsigned short* dst, const unsigned short* src, bool valid);
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
inline float ka_exp2(float x) { return std::exp2(x); }
inline float ka_neg_inf() { return -std::numeric_limits<float>::infinity(); }
#endif

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

template <int KD>
struct KaWarpState {
  float o[2][KD / 8][4];  // the weighted sums of v, unnormalised, of 2 x 16 rows
  float m[2][2];          // the running maxima of rows g and g + 8 of each 16 (base 2)
  float l[2][2];          // and the sums of their weights (this lane's columns only)
};

// s = q kᵀ for the warp's 32 rows (q_rows: its first in shared memory) and the tile's keys.
template <int KD, bool kBf16>
KA_FN void ka_scores(float (&s)[2][kKaKeys / 8][4], const unsigned short* q_rows,
                     const unsigned short* keys, int lane) {
  constexpr int kStride = ka_stride(KD);
  KA_UNROLL for (int mi = 0; mi < 2; ++mi) {
    KA_UNROLL for (int n = 0; n < kKaKeys / 8; ++n) {
      s[mi][n][0] = s[mi][n][1] = s[mi][n][2] = s[mi][n][3] = 0.f;
    }
  }
  // A fragments: lanes 0-15 address rows 0-15 at dims kk*16.., lanes 16-31 the same rows at
  // kk*16+8... B fragments of kᵀ for two key tiles at once: lanes 0-7 address keys n*8.. at dims
  // kk*16.., lanes 8-15 the same keys at kk*16+8.., lanes 16-31 the next 8 keys.
  const KaShared q_lane = ka_shared(q_rows + (lane & 15) * kStride + (lane >> 4) * 8);
  const KaShared k_lane =
      ka_shared(keys + ((lane >> 4) * 8 + (lane & 7)) * kStride + ((lane >> 3) & 1) * 8);
  KA_UNROLL for (int kk = 0; kk < KD / 16; ++kk) {
    unsigned a[2][4];
    KA_UNROLL for (int mi = 0; mi < 2; ++mi) {
      ka_ldsm(a[mi], q_lane + 2 * (16 * mi * kStride + kk * 16));
    }
    KA_UNROLL for (int n = 0; n < kKaKeys / 8; n += 2) {
      unsigned f[4];
      ka_ldsm(f, k_lane + 2 * (n * 8 * kStride + kk * 16));
      KA_UNROLL for (int mi = 0; mi < 2; ++mi) {
        tensor_core::tc_mma<kBf16>(s[mi][n], a[mi], f[0], f[1]);
        tensor_core::tc_mma<kBf16>(s[mi][n + 1], a[mi], f[2], f[3]);
      }
    }
  }
}

// The scores in base 2 with the bias added and the excluded ones -inf: each element's row and key
// checked only on a tile that needs it (`checked`). Without a mask or bias the checks are on
// offsets within the tile: keys at or past `keys_left` are past the end, and under the causal cut
// key column c of the warp's row r is after its query where c > r + diagonal.
template <bool kBf16, bool kMask, bool kBias>
KA_FN void ka_prepare_scores(float (&s)[2][kKaKeys / 8][4], const KaParams& p, bool checked,
                             long long b, long long h, long long first_row, long long k0,
                             int lane) {
  if (!checked) {
    KA_UNROLL for (int mi = 0; mi < 2; ++mi) {
      KA_UNROLL for (int n = 0; n < kKaKeys / 8; ++n) {
        KA_UNROLL for (int c = 0; c < 4; ++c) s[mi][n][c] *= p.scale_log2;
      }
    }
    return;
  }
  const int g = lane >> 2, t = lane & 3;
  const float neg_inf = ka_neg_inf();
  const long long left = p.keys - k0, gap = first_row - k0;
  const int keys_left = left < kKaKeys ? static_cast<int>(left) : kKaKeys;
  // Clamped to where it decides nothing more: every key kept (>= kKaKeys), or every key after
  // every row (< -32).
  const int diagonal =
      !p.causal || gap >= kKaKeys ? kKaKeys : (gap < -32 ? -33 : static_cast<int>(gap));
  KA_UNROLL for (int mi = 0; mi < 2; ++mi) {
    KA_UNROLL for (int n = 0; n < kKaKeys / 8; ++n) {
      KA_UNROLL for (int c = 0; c < 4; ++c) {
        const int row = 16 * mi + g + (c >> 1) * 8, column = n * 8 + 2 * t + (c & 1);
        float x = s[mi][n][c] * p.scale_log2;
        bool excluded = column >= keys_left || column > row + diagonal;
        if constexpr (kMask || kBias) {
          const long long qi = first_row + row, kj = k0 + column;
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
}

// The online softmax: each row's maximum over the tile (the quad's four lanes hold its 64
// columns), the state rescaled to the new maximum, and s made the weights 2^(s - max). The
// maxima leave NaN scores out (fmax), but a NaN score's weight is NaN, and so are its row's sum
// and output, as the default's softmax gives. A row whose maximum is still -inf has had every key
// excluded (or NaN): its weights are taken against 0, so that excluded keys weigh 0, NaN ones NaN.
// The accumulated values are rescaled only when a row of the warp has a new maximum.
template <int KD>
KA_FN void ka_softmax_step(float (&s)[2][kKaKeys / 8][4], KaWarpState<KD>& w) {
  const float neg_inf = ka_neg_inf();
  float rescale[2][2];
  bool changed = false;
  KA_UNROLL for (int mi = 0; mi < 2; ++mi) {
    KA_UNROLL for (int r = 0; r < 2; ++r) {
      float tile_max = neg_inf;
      KA_UNROLL for (int n = 0; n < kKaKeys / 8; ++n) {
        tile_max = ka_fmax(tile_max, ka_fmax(s[mi][n][2 * r], s[mi][n][2 * r + 1]));
      }
      tile_max = ka_fmax(tile_max, ka_shfl_xor(tile_max, 1));
      tile_max = ka_fmax(tile_max, ka_shfl_xor(tile_max, 2));
      const float next = ka_fmax(w.m[mi][r], tile_max);
      const float base = next == neg_inf ? 0.f : next;
      rescale[mi][r] = ka_exp2(w.m[mi][r] - base);
      changed = changed || next != w.m[mi][r];
      w.m[mi][r] = next;
      float sum = w.l[mi][r] * rescale[mi][r];
      KA_UNROLL for (int n = 0; n < kKaKeys / 8; ++n) {
        KA_UNROLL for (int e = 0; e < 2; ++e) {
          const float weight = ka_exp2(s[mi][n][2 * r + e] - base);
          s[mi][n][2 * r + e] = weight;
          sum += weight;
        }
      }
      w.l[mi][r] = sum;
    }
  }
  if (ka_any(changed)) {
    KA_UNROLL for (int mi = 0; mi < 2; ++mi) {
      KA_UNROLL for (int d = 0; d < KD / 8; ++d) {
        KA_UNROLL for (int c = 0; c < 4; ++c) w.o[mi][d][c] *= rescale[mi][c >> 1];
      }
    }
  }
}

// o += weights · v for the tile's keys (values: its first row in shared memory).
template <int KD, bool kBf16>
KA_FN void ka_accumulate(const float (&s)[2][kKaKeys / 8][4], KaWarpState<KD>& w,
                         const unsigned short* values, int lane) {
  constexpr int kStride = ka_stride(KD);
  // B fragments of v for two dim tiles at once: lanes 0-7 address keys kk*16.. at dims d*8..,
  // lanes 8-15 keys kk*16+8.., lanes 16-31 the same keys at dims (d+1)*8...
  const KaShared v_lane =
      ka_shared(values + (((lane >> 3) & 1) * 8 + (lane & 7)) * kStride + (lane >> 4) * 8);
  KA_UNROLL for (int kk = 0; kk < kKaKeys / 16; ++kk) {
    unsigned a[2][4];
    KA_UNROLL for (int mi = 0; mi < 2; ++mi) {
      a[mi][0] = ka_pack<kBf16>(s[mi][2 * kk][0], s[mi][2 * kk][1]);
      a[mi][1] = ka_pack<kBf16>(s[mi][2 * kk][2], s[mi][2 * kk][3]);
      a[mi][2] = ka_pack<kBf16>(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
      a[mi][3] = ka_pack<kBf16>(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
    }
    KA_UNROLL for (int d = 0; d < KD / 8; d += 2) {
      unsigned f[4];
      ka_ldsm_t(f, v_lane + 2 * (kk * 16 * kStride + d * 8));
      KA_UNROLL for (int mi = 0; mi < 2; ++mi) {
        tensor_core::tc_mma<kBf16>(w.o[mi][d], a[mi], f[0], f[1]);
        tensor_core::tc_mma<kBf16>(w.o[mi][d + 1], a[mi], f[2], f[3]);
      }
    }
  }
}

// The block's rows divided by their sums, rounded to the input type; rows with every key
// excluded (sum 0) give zeros, rows past the end nothing.
template <int KD, bool kBf16>
KA_FN void ka_store(KaWarpState<KD>& w, const KaParams& p, long long bh, long long first_row,
                    int lane) {
  const int g = lane >> 2, t = lane & 3;
  unsigned short* out = reinterpret_cast<unsigned short*>(p.out) + bh * p.queries * KD;
  KA_UNROLL for (int mi = 0; mi < 2; ++mi) {
    KA_UNROLL for (int r = 0; r < 2; ++r) {
      float sum = w.l[mi][r];
      sum += ka_shfl_xor(sum, 1);
      sum += ka_shfl_xor(sum, 2);
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

// One block: query rows [q0, q0 + 128) of (batch, head) bh, the last query blocks first (under a
// causal cut they have the most keys to walk). smem: ka_shared_bytes(KD), 16-byte aligned.
template <int KD, bool kBf16, bool kMask, bool kBias>
KA_FN void ka_attention(const KaParams& p, unsigned short* smem) {
  constexpr int kStride = ka_stride(KD), kTile = kKaKeys * kStride;
  unsigned short* q_tile = smem;
  unsigned short* k_tiles = smem + kKaRows * kStride;  // two stages
  unsigned short* v_tiles = k_tiles + 2 * kTile;
  const int warp = static_cast<int>(ka_thread()) >> 5, lane = static_cast<int>(ka_thread()) & 31;
  const long long heads_total = p.batch * p.heads;
  const long long bh = static_cast<long long>(ka_block()) % heads_total;
  const long long q0 =
      (p.query_blocks - 1 - static_cast<long long>(ka_block()) / heads_total) * kKaRows;
  const long long b = bh / p.heads, h = bh % p.heads;
  const auto* Q =
      reinterpret_cast<const unsigned short*>(p.q) + b * p.q_strides[0] + h * p.q_strides[1];
  const auto* K =
      reinterpret_cast<const unsigned short*>(p.k) + b * p.k_strides[0] + h * p.k_strides[1];
  const auto* V =
      reinterpret_cast<const unsigned short*>(p.v) + b * p.v_strides[0] + h * p.v_strides[1];
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
      ka_load_tile<KD, kKaKeys>(v_tiles + j * kTile, V, p.v_strides[2], j * kKaKeys, p.keys);
    }
    ka_commit();
  }

  KaWarpState<KD> w;
  KA_UNROLL for (int mi = 0; mi < 2; ++mi) {
    KA_UNROLL for (int d = 0; d < KD / 8; ++d) {
      w.o[mi][d][0] = w.o[mi][d][1] = w.o[mi][d][2] = w.o[mi][d][3] = 0.f;
    }
    w.m[mi][0] = w.m[mi][1] = ka_neg_inf();
    w.l[mi][0] = w.l[mi][1] = 0.f;
  }
  for (int j = 0; j < key_tiles; ++j) {
    ka_wait<1>();  // this thread's copies of tile j are in
    ka_sync();     // and every thread's
    const long long k0 = static_cast<long long>(j) * kKaKeys;
    // Under the causal cut a warp whose last row comes before the tile's first key has nothing
    // to add from it.
    if (!p.causal || k0 <= first_row + 31) {
      float s[2][kKaKeys / 8][4];
      ka_scores<KD, kBf16>(s, q_tile + warp * 32 * kStride, k_tiles + (j & 1) * kTile, lane);
      const bool checked =
          kMask || kBias || k0 + kKaKeys > p.keys || (p.causal && k0 + kKaKeys - 1 > first_row);
      ka_prepare_scores<kBf16, kMask, kBias>(s, p, checked, b, h, first_row, k0, lane);
      ka_softmax_step<KD>(s, w);
      ka_accumulate<KD, kBf16>(s, w, v_tiles + (j & 1) * kTile, lane);
    }
    ka_sync();  // every warp is done with stage j & 1
    if (j + 2 < key_tiles) {
      ka_load_tile<KD, kKaKeys>(k_tiles + (j & 1) * kTile, K, p.k_strides[2], k0 + 2 * kKaKeys,
                                p.keys);
      ka_load_tile<KD, kKaKeys>(v_tiles + (j & 1) * kTile, V, p.v_strides[2], k0 + 2 * kKaKeys,
                                p.keys);
    }
    ka_commit();
  }
  ka_store<KD, kBf16>(w, p, bh, first_row, lane);
}

}  // namespace kiln::cuda::attention_kernels

#endif  // KILN_CUDA_ATTENTION_KERNELS_H
