// Attention for f32 inputs (attention.h's attention_simt_*, run by cuda_attention.cpp; NVRTC
// compiles this text after attention_kernels.h's, whose KaParams and helpers it uses): the
// forward pass on the ordinary float units, for head dims up to 64, where f32 models
// (BERT-base's 64, MiniLM's 32) otherwise ran attention as its composition: the scores
// [B, H, Sq, Sk] written by one product, read and written by the masking and the softmax, read by
// a second product, and q, k, v and the output copied between [B, S, H, D] and [B, H, S, D]
// around them.
//
// A block of 128 threads takes 128 query rows of one (batch, head), a row a thread: its q (scaled
// to base 2) and its running output in registers, the keys and values in tiles of 16 rows through
// shared memory. Every thread reads the same key or value element at once (a broadcast: no bank
// conflicts), four at a time, so each shared read feeds four fused multiply-adds. The online
// softmax as the tensor-core kernels keep it: per tile the scores, their maximum, the running sums
// rescaled when the maximum moved, the weights multiplied into v. A row whose every key is
// excluded gives zeros, a NaN score a NaN row, as the default.
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
template <int KD, int kKeys, bool kMask, bool kBias>
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

  // Under the causal cut no key after the block's last query is seen.
  long long key_end = p.keys;
  if (p.causal && first + kKfRows < key_end) key_end = first + kKfRows;
  for (long long k0 = 0; k0 < key_end; k0 += kKeys) {
    __syncthreads();  // the previous tile is used up
    for (int i = t; i < kKeys * KD / 4; i += kKfRows) {
      const int row = i / (KD / 4), column = i % (KD / 4) * 4;
      const long long kj = k0 + row;
      float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
      if (kj < p.keys) {
        kv = *reinterpret_cast<const float4*>(k + kj * p.k_strides[2] + column);
        vv = *reinterpret_cast<const float4*>(v + kj * p.v_strides[2] + column);
      }
      *reinterpret_cast<float4*>(keys + row * KD + column) = kv;
      *reinterpret_cast<float4*>(values + row * KD + column) = vv;
    }
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
      const float w = exp2f(s[j] - base);
      l += w;
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

}  // namespace kiln::cuda::attention_kernels

#endif  // KILN_CUDA_ATTENTION_SIMT_H
