// Attention for f32 inputs (attention.h's attention_simt_*, run by cuda_attention.cpp; NVRTC
// compiles this text after attention_kernels.h's, whose KaParams and helpers it uses): the
// forward pass on the ordinary float units, for head dims up to 64, where f32 models
// (BERT-base's 64, MiniLM's 32) otherwise ran attention as its composition: the scores
// [B, H, Sq, Sk] written by one product, read and written by the masking and the softmax, read by
// a second product, and q, k, v and the output copied between [B, S, H, D] and [B, H, S, D]
// around them. Two kernels: the tiled one (kt_attention, below) for head dims 32 and 64, and the
// row-a-thread one (kf_attention) for the other multiples of 4 up to 64, or for every head dim
// with KILN_ATTENTION_F32_TILED=0.
//
// The row-a-thread kernel: a block of 128 threads takes 128 query rows of one (batch, head), a row
// a thread: its q (scaled to base 2) and its running output in registers, the keys and values in
// tiles of 16 rows through shared memory. Every thread reads the same key or value element at once
// (a broadcast: no bank conflicts), four at a time, so each shared read feeds four fused
// multiply-adds. The online softmax as the tensor-core kernels keep it: per tile the scores, their
// maximum, the running sums rescaled when the maximum moved, the weights multiplied into v. A row
// whose every key is excluded gives zeros, a NaN score a NaN row, as the default.
//
// The output is written as [B, Sq, H, D] (the plugin returns it as a [B, H, Sq, D] view of that
// memory): the layout the heads are merged back into, so that merging them needs no copy.
#ifndef KILN_CUDA_ATTENTION_SIMT_H
#define KILN_CUDA_ATTENTION_SIMT_H

#ifndef __CUDACC_RTC__
#include "backends/cuda/attention_kernels.h"
#endif

namespace kiln::cuda::attention_kernels {

inline constexpr int kKfRows = 128;  // query rows of a block, one a thread
// Key and value rows of a shared tile, unless KILN_ATTENTION_F32_KEYS says 32 or 64. H100, f32
// BERT forwards at batch 64 x 128: MiniLM (head dim 32) 5.63 / 5.72 / 6.23 ms and BERT-base (64)
// 35.3 / 35.6 / 37.3 ms with 16 / 32 / 64; two or four threads a row, each with part of the
// dims, were slower still (base 37.2 and 39.3 ms against 35.5 with one, at 32 keys).
inline constexpr int kKfKeys = 16;
inline constexpr int kKfMaxDepth = 64;

KA_FN constexpr bool kf_depth_supported(long long depth) {
  return depth > 0 && depth <= kKfMaxDepth && depth % 4 == 0;
}
// Shared bytes of a block: a tile of `keys` keys and one of values.
KA_FN constexpr int kf_shared_bytes(int depth, int keys) { return 2 * keys * depth * 4; }

#ifdef __CUDACC_RTC__
// Keys k0 .. k0 + kRows - 1 of k and v into shared tiles (a key's row `pitch` floats after the
// one before, a value's KD), zeros past the last key; the block's kThreads threads share the
// float4 copies.
template <int KD, int kRows, int kThreads>
__device__ __forceinline__ void kf_load_tile(const KaParams& p, const float* k, const float* v,
                                             long long k0, int t, float* keys, int pitch,
                                             float* values) {
  for (int e = t; e < kRows * KD / 4; e += kThreads) {
    const int row = e / (KD / 4), column = e % (KD / 4) * 4;
    const long long kj = k0 + row;
    float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
    if (kj < p.keys) {
      kv = *reinterpret_cast<const float4*>(k + kj * p.k_strides[2] + column);
      vv = *reinterpret_cast<const float4*>(v + kj * p.v_strides[2] + column);
    }
    *reinterpret_cast<float4*>(keys + row * pitch + column) = kv;
    *reinterpret_cast<float4*>(values + row * KD + column) = vv;
  }
}

template <int KD, int kKeys, bool kMask, bool kBias, bool kDropout = false>
__device__ __forceinline__ void kf_attention(const KaParams& p, float* shared) {
  static_assert(KD % 4 == 0 && KD <= kKfMaxDepth, "head dims up to 64, multiples of 4");
  const long long block = blockIdx.x;
  const long long bh = block / p.query_blocks, first = block % p.query_blocks * kKfRows;
  const long long b = bh / p.heads, h = bh % p.heads;
  const int t = threadIdx.x;
  const long long qi = first + t;
  const bool live = qi < p.queries;
  const float* q = reinterpret_cast<const float*>(p.q) + b * p.q_strides[0] + h * p.q_strides[1];
  const float* k = reinterpret_cast<const float*>(p.k) + b * p.k_strides[0] + h * p.k_strides[1];
  const float* v = reinterpret_cast<const float*>(p.v) + b * p.v_strides[0] + h * p.v_strides[1];
  float* keys = shared;
  float* values = shared + kKeys * KD;
  const float neg_inf = ka_neg_inf();

  float qr[KD], acc[KD];
  KA_UNROLL for (int d = 0; d < KD; d += 4) {
    const float4 x = live ? *reinterpret_cast<const float4*>(q + qi * p.q_strides[2] + d)
                          : make_float4(0.f, 0.f, 0.f, 0.f);
    qr[d] = x.x * p.scale_log2;
    qr[d + 1] = x.y * p.scale_log2;
    qr[d + 2] = x.z * p.scale_log2;
    qr[d + 3] = x.w * p.scale_log2;
    acc[d] = acc[d + 1] = acc[d + 2] = acc[d + 3] = 0.f;
  }
  float m = neg_inf, l = 0.f;  // the row's running maximum (base 2) and sum of weights
  unsigned long long dropout_key = 0;
  if constexpr (kDropout) dropout_key = ka_dropout_key(p);

  // Under the causal cut no key after the block's last query is seen.
  long long key_end = p.keys;
  if (p.causal && first + kKfRows < key_end) key_end = first + kKfRows;
  for (long long k0 = 0; k0 < key_end; k0 += kKeys) {
    __syncthreads();  // the previous tile is used up
    kf_load_tile<KD, kKeys, kKfRows>(p, k, v, k0, t, keys, KD, values);
    __syncthreads();
    float s[kKeys];
    float tile_max = neg_inf;
    KA_UNROLL for (int j = 0; j < kKeys; ++j) {
      float dot = 0.f;
      KA_UNROLL for (int d = 0; d < KD; d += 4) {
        const float4 kk = *reinterpret_cast<const float4*>(keys + j * KD + d);
        dot = fmaf(qr[d], kk.x, dot);
        dot = fmaf(qr[d + 1], kk.y, dot);
        dot = fmaf(qr[d + 2], kk.z, dot);
        dot = fmaf(qr[d + 3], kk.w, dot);
      }
      const long long kj = k0 + j;
      bool excluded = kj >= p.keys || (p.causal && kj > qi);
      if constexpr (kMask || kBias) {
        if (!excluded && live) {
          if constexpr (kMask) {
            excluded = reinterpret_cast<const unsigned char*>(
                           p.mask)[b * p.mask_strides[0] + h * p.mask_strides[1] +
                                   qi * p.mask_strides[2] + kj * p.mask_strides[3]] != 0;
          }
          if constexpr (kBias) {
            dot += reinterpret_cast<const float*>(
                       p.bias)[b * p.bias_strides[0] + h * p.bias_strides[1] +
                               qi * p.bias_strides[2] + kj * p.bias_strides[3]] *
                   1.4426950408889634f;
          }
        }
      }
      s[j] = excluded ? neg_inf : dot;
      tile_max = fmaxf(tile_max, s[j]);  // leaves NaN out; a NaN weight below makes the row NaN
    }
    const float next = fmaxf(m, tile_max);
    if (next != m) {  // the maximum moved: what is summed so far is rescaled to it
      const float rescale = exp2f(m - next);
      l *= rescale;
      KA_UNROLL for (int d = 0; d < KD; ++d) acc[d] *= rescale;
      m = next;
    }
    // A row with every key so far excluded has maximum -inf: its weights are taken against 0, so
    // that excluded keys weigh 0.
    const float base = m == neg_inf ? 0.f : m;
    KA_UNROLL for (int j = 0; j < kKeys; ++j) {
      float w = exp2f(s[j] - base);
      l += w;
      // Dropout: the sum keeps every weight, the values take the kept ones.
      if constexpr (kDropout) {
        w *= ka_dropout_keeps(p, dropout_key, bh, qi, k0 + j) ? p.dropout_scale : 0.f;
      }
      KA_UNROLL for (int d = 0; d < KD; d += 4) {
        const float4 vv = *reinterpret_cast<const float4*>(values + j * KD + d);
        acc[d] = fmaf(w, vv.x, acc[d]);
        acc[d + 1] = fmaf(w, vv.y, acc[d + 1]);
        acc[d + 2] = fmaf(w, vv.z, acc[d + 2]);
        acc[d + 3] = fmaf(w, vv.w, acc[d + 3]);
      }
    }
  }
  if (!live) return;
  // Every key excluded: zeros (the sum is 0 and so is every value); NaN stays NaN.
  const float inverse = l == 0.f ? 0.f : 1.f / l;
  float* out = reinterpret_cast<float*>(p.out) + ((b * p.queries + qi) * p.heads + h) * KD;
  KA_UNROLL for (int d = 0; d < KD; d += 4) {
    *reinterpret_cast<float4*>(out + d) = make_float4(acc[d] * inverse, acc[d + 1] * inverse,
                                                      acc[d + 2] * inverse, acc[d + 3] * inverse);
  }
}
#endif

// The tiled kernel, for head dims 32 and 64 (BERT-base's and MiniLM's): the scores and the
// weighted sum as two small matrix products per tile, each thread a 4 x 8 piece of the scores and
// a 4 x KD/8 piece of the output. A block of 128 threads takes 64 query rows and tiles of 64 keys;
// thread t holds rows rg + 16 i (rg = t / 8, i < 4), keys cg + 8 j (cg = t % 8, j < 8) and the
// output's float4 columns cg + 8 g. Per four dims of the scores' product a thread reads 4 float4
// of q and 8 of k from shared memory for 128 multiply-adds (the row-a-thread kernel above reads
// one float4 per 4): the float units, not the shared reads, bound it. The 8 threads of a row are
// lanes of one warp, so its maximum and sum are shuffles. Shared rows are padded so that each
// warp's reads and writes fall in distinct banks: q and k by 4 floats, the weights (which take k's
// place once the scores are made) to a pitch of 72.
inline constexpr int kKtRows = 64;  // query rows of a block
inline constexpr int kKtKeys = 64;  // keys of a tile
inline constexpr int kKtThreads = 128;
inline constexpr int kKtWeightPitch = kKtKeys + 8;
// Blocks an SM holds at once (__launch_bounds__): 4 caps a thread at 128 registers, which spills a
// few (the products' loops are unrolled by 2). H100, BERT forwards at batch 64 x 128, Nsight
// Compute per launch: head dim 64 (BERT-base) 148 us with 3 blocks (164 registers, no spill), 134
// us with 4; head dim 32 (MiniLM) 91 and 81 us. Unrolled by 1 or 4: slower in both. The
// row-a-thread kernel took 218 and 105 us; torch's fmha_cutlassF_f32 139 us at head dim 64.
inline constexpr int kKtMinBlocks = 4;

KA_FN constexpr bool kt_depth_supported(long long depth) { return depth == 32 || depth == 64; }
// Shared floats: q (pitch KD + 4), k or the weights (whichever is longer), v (pitch KD).
KA_FN constexpr int kt_shared_bytes(int depth) {
  return 4 *
         (kKtRows * (depth + 4) +
          kKtKeys * (depth + 4 > kKtWeightPitch ? depth + 4 : kKtWeightPitch) + kKtKeys * depth);
}

#ifdef __CUDACC_RTC__
template <int KD, bool kMask, bool kBias, bool kDropout = false>
__device__ __forceinline__ void kt_attention(const KaParams& p, float* shared) {
  static_assert(KD == 32 || KD == 64, "head dims 32 and 64");
  constexpr int kPitch = KD + 4;    // q's and k's rows in shared memory
  constexpr int kGroups = KD / 32;  // output float4 columns of a thread
  const long long block = blockIdx.x;
  const long long bh = block / p.query_blocks, first = block % p.query_blocks * kKtRows;
  const long long b = bh / p.heads, h = bh % p.heads;
  const int t = threadIdx.x, rg = t >> 3, cg = t & 7;
  const float* q = reinterpret_cast<const float*>(p.q) + b * p.q_strides[0] + h * p.q_strides[1];
  const float* k = reinterpret_cast<const float*>(p.k) + b * p.k_strides[0] + h * p.k_strides[1];
  const float* v = reinterpret_cast<const float*>(p.v) + b * p.v_strides[0] + h * p.v_strides[1];
  float* qs = shared;
  float* ks = qs + kKtRows * kPitch;  // the weights' tile too
  float* vs = ks + kKtKeys * (kPitch > kKtWeightPitch ? kPitch : kKtWeightPitch);
  const float neg_inf = ka_neg_inf();

  // q, scaled to base 2; rows past the queries are zeros.
  for (int e = t; e < kKtRows * KD / 4; e += kKtThreads) {
    const int row = e / (KD / 4), column = e % (KD / 4) * 4;
    const long long qi = first + row;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (qi < p.queries) {
      x = *reinterpret_cast<const float4*>(q + qi * p.q_strides[2] + column);
      x = make_float4(x.x * p.scale_log2, x.y * p.scale_log2, x.z * p.scale_log2,
                      x.w * p.scale_log2);
    }
    *reinterpret_cast<float4*>(qs + row * kPitch + column) = x;
  }
  long long qi[4];
  const unsigned char* mask_row[4];
  const float* bias_row[4];
  KA_UNROLL for (int i = 0; i < 4; ++i) {
    qi[i] = first + rg + 16 * i;
    if constexpr (kMask) {
      mask_row[i] = reinterpret_cast<const unsigned char*>(p.mask) + b * p.mask_strides[0] +
                    h * p.mask_strides[1] + qi[i] * p.mask_strides[2];
    }
    if constexpr (kBias) {
      bias_row[i] = reinterpret_cast<const float*>(p.bias) + b * p.bias_strides[0] +
                    h * p.bias_strides[1] + qi[i] * p.bias_strides[2];
    }
  }
  unsigned long long dropout_key = 0;
  if constexpr (kDropout) dropout_key = ka_dropout_key(p);
  float acc[4][kGroups][4];
  float m[4], l[4];  // each row's running maximum (base 2) and this thread's share of its sum
  KA_UNROLL for (int i = 0; i < 4; ++i) {
    m[i] = neg_inf;
    l[i] = 0.f;
    KA_UNROLL for (int g = 0; g < kGroups; ++g) {
      acc[i][g][0] = acc[i][g][1] = acc[i][g][2] = acc[i][g][3] = 0.f;
    }
  }

  // Under the causal cut no key after the block's last query is seen.
  long long key_end = p.keys;
  if (p.causal && first + kKtRows < key_end) key_end = first + kKtRows;
  for (long long k0 = 0; k0 < key_end; k0 += kKtKeys) {
    __syncthreads();  // the previous tile's weights and values are used up (and q is stored)
    kf_load_tile<KD, kKtKeys, kKtThreads>(p, k, v, k0, t, ks, kPitch, vs);
    __syncthreads();
    float s[4][8];
    KA_UNROLL for (int i = 0; i < 4; ++i) { KA_UNROLL for (int j = 0; j < 8; ++j) s[i][j] = 0.f; }
#pragma unroll 2
    for (int d = 0; d < KD; d += 4) {
      float4 qv[4], kv[8];
      KA_UNROLL for (int i = 0; i < 4; ++i) {
        qv[i] = *reinterpret_cast<const float4*>(qs + (rg + 16 * i) * kPitch + d);
      }
      KA_UNROLL for (int j = 0; j < 8; ++j) {
        kv[j] = *reinterpret_cast<const float4*>(ks + (cg + 8 * j) * kPitch + d);
      }
      KA_UNROLL for (int i = 0; i < 4; ++i) {
        KA_UNROLL for (int j = 0; j < 8; ++j) {
          s[i][j] = fmaf(qv[i].x, kv[j].x, s[i][j]);
          s[i][j] = fmaf(qv[i].y, kv[j].y, s[i][j]);
          s[i][j] = fmaf(qv[i].z, kv[j].z, s[i][j]);
          s[i][j] = fmaf(qv[i].w, kv[j].w, s[i][j]);
        }
      }
    }
    KA_UNROLL for (int i = 0; i < 4; ++i) {
      float tile_max = neg_inf;
      KA_UNROLL for (int j = 0; j < 8; ++j) {
        const long long kj = k0 + cg + 8 * j;
        bool excluded = kj >= p.keys || (p.causal && kj > qi[i]);
        if constexpr (kMask || kBias) {
          if (!excluded && qi[i] < p.queries) {
            if constexpr (kMask) excluded = mask_row[i][kj * p.mask_strides[3]] != 0;
            if constexpr (kBias) {
              s[i][j] += bias_row[i][kj * p.bias_strides[3]] * 1.4426950408889634f;
            }
          }
        }
        s[i][j] = excluded ? neg_inf : s[i][j];
        tile_max = fmaxf(tile_max, s[i][j]);  // leaves NaN out; a NaN weight makes the row NaN
      }
      // The row's 8 threads are lanes cg = 0..7 of one warp.
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 4));
      const float next = fmaxf(m[i], tile_max);
      if (next != m[i]) {  // the maximum moved: what is summed so far is rescaled to it
        const float rescale = exp2f(m[i] - next);
        l[i] *= rescale;
        KA_UNROLL for (int g = 0; g < kGroups; ++g) {
          KA_UNROLL for (int c = 0; c < 4; ++c) acc[i][g][c] *= rescale;
        }
        m[i] = next;
      }
      // A row with every key so far excluded has maximum -inf: its weights are taken against 0,
      // so that excluded keys weigh 0.
      const float base = m[i] == neg_inf ? 0.f : m[i];
      KA_UNROLL for (int j = 0; j < 8; ++j) {
        s[i][j] = exp2f(s[i][j] - base);
        l[i] += s[i][j];
      }
    }
    __syncthreads();  // every thread has read its keys: the weights take their place
    KA_UNROLL for (int i = 0; i < 4; ++i) {
      KA_UNROLL for (int j = 0; j < 8; ++j) {
        float w = s[i][j];
        // Dropout: the sums keep every weight, the values take the kept ones.
        if constexpr (kDropout) {
          w *= ka_dropout_keeps(p, dropout_key, bh, qi[i], k0 + cg + 8 * j) ? p.dropout_scale : 0.f;
        }
        ks[(rg + 16 * i) * kKtWeightPitch + cg + 8 * j] = w;
      }
    }
    __syncthreads();
#pragma unroll 2
    for (int j = 0; j < kKtKeys; j += 4) {
      float4 w[4];
      KA_UNROLL for (int i = 0; i < 4; ++i) {
        w[i] = *reinterpret_cast<const float4*>(ks + (rg + 16 * i) * kKtWeightPitch + j);
      }
      KA_UNROLL for (int jj = 0; jj < 4; ++jj) {
        float4 vv[kGroups];
        KA_UNROLL for (int g = 0; g < kGroups; ++g) {
          vv[g] = *reinterpret_cast<const float4*>(vs + (j + jj) * KD + 4 * (cg + 8 * g));
        }
        KA_UNROLL for (int i = 0; i < 4; ++i) {
          const float wi = jj == 0 ? w[i].x : jj == 1 ? w[i].y : jj == 2 ? w[i].z : w[i].w;
          KA_UNROLL for (int g = 0; g < kGroups; ++g) {
            acc[i][g][0] = fmaf(wi, vv[g].x, acc[i][g][0]);
            acc[i][g][1] = fmaf(wi, vv[g].y, acc[i][g][1]);
            acc[i][g][2] = fmaf(wi, vv[g].z, acc[i][g][2]);
            acc[i][g][3] = fmaf(wi, vv[g].w, acc[i][g][3]);
          }
        }
      }
    }
  }
  KA_UNROLL for (int i = 0; i < 4; ++i) {
    float sum = l[i];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    sum += __shfl_xor_sync(0xffffffffu, sum, 4);
    if (qi[i] >= p.queries) continue;
    // Every key excluded: zeros (the sum is 0 and so is every value); NaN stays NaN.
    const float inverse = sum == 0.f ? 0.f : 1.f / sum;
    float* out = reinterpret_cast<float*>(p.out) + ((b * p.queries + qi[i]) * p.heads + h) * KD;
    KA_UNROLL for (int g = 0; g < kGroups; ++g) {
      *reinterpret_cast<float4*>(out + 4 * (cg + 8 * g)) =
          make_float4(acc[i][g][0] * inverse, acc[i][g][1] * inverse, acc[i][g][2] * inverse,
                      acc[i][g][3] * inverse);
    }
  }
}
#endif

}  // namespace kiln::cuda::attention_kernels

#endif  // KILN_CUDA_ATTENTION_SIMT_H
