// The flash-attention kernel's source (attention.h). Fragment layouts are those of PTX's
// mma.m16n8k16 with 16-bit inputs: lane = 4 g + t holds A (row-major 16x16) elements
// (g, 2t..2t+1), (g + 8, ..), (g, 2t + 8..), (g + 8, 2t + 8..); B (16x8, column-major) elements
// (2t..2t+1, g), (2t + 8.., g); C (16x8, f32) elements (g, 2t..2t+1), (g + 8, 2t..2t+1). Two C
// tiles side by side are, element for element, one A tile: the weights go from the score
// accumulators to the second product without leaving registers.
#include <string>

#include "backends/cuda/attention.h"
#include "backends/cuda/kernel_source.h"

namespace kiln::cuda {

namespace {

constexpr const char* kAttentionKernel = R"CUDA(
#define BR 64
#define BC 64
#define STRIDE (KD + 8)  // shared rows padded by 16 bytes: fragment loads hit 32 banks
struct P {
  u64 q, k, v, out, mask, bias;
  i64 qs[3], ks[3], vs[3], ms[4], bs[4];
  i64 batch, heads, sq, sk, q_blocks;
  float scale_log2;
  int causal;
};

__device__ __forceinline__ unsigned kiln_smem(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
// 16 bytes from global to shared memory, or 16 zero bytes when !valid (nothing is read then).
__device__ __forceinline__ void kiln_copy16(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void kiln_copies_wait() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
__device__ __forceinline__ void kiln_mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32." ELEM "." ELEM ".f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// lo in the low half, hi in the high half, each rounded to nearest even.
__device__ __forceinline__ unsigned kiln_pack(float lo, float hi) {
  unsigned r;
  asm("cvt.rn." ELEM "x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// max that keeps a NaN (fmaxf drops it): a NaN score makes its row NaN, as the default's softmax.
__device__ __forceinline__ float kiln_max(float a, float b) { return (a != a || a > b) ? a : b; }
// Four 8x8 tiles of 16-bit values; lanes 8i..8i+7 give the row addresses of tile i, and lane
// 4r + c receives row r, columns 2c and 2c + 1 of each (of each transposed, for kiln_ldsm_t).
__device__ __forceinline__ void kiln_ldsm(unsigned* r, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void kiln_ldsm_t(unsigned* r, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Rows [row0, row0 + 64) of a [rows, KD] operand (row stride `stride`) into shared memory; rows
// past the end are zeros. One group of asynchronous copies.
__device__ __forceinline__ void kiln_load_tile(unsigned short* dst, const unsigned short* src,
                                               i64 stride, i64 row0, i64 rows) {
  constexpr int kChunks = KD / 8;  // 16-byte pieces per row
  for (int c = threadIdx.x; c < BR * kChunks; c += blockDim.x) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = row0 + r < rows;
    kiln_copy16(kiln_smem(dst + r * STRIDE + col), valid ? src + (row0 + r) * stride + col : src,
                valid);
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

extern "C" __global__ void __launch_bounds__(128) kiln_attention(P p) {
  __shared__ __align__(16) unsigned short ks[BC * STRIDE];
  __shared__ __align__(16) unsigned short vs[BC * STRIDE];
  const float kNegInf = __int_as_float(0xff800000);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const i64 heads_total = p.batch * p.heads;
  const i64 bh = blockIdx.x % heads_total;
  // The last query blocks first: under a causal cut they have the most keys to walk.
  const i64 q0 = (p.q_blocks - 1 - (i64)blockIdx.x / heads_total) * BR;
  const i64 b = bh / p.heads, h = bh % p.heads;
  const unsigned short* Q = (const unsigned short*)p.q + b * p.qs[0] + h * p.qs[1];
  const unsigned short* K = (const unsigned short*)p.k + b * p.ks[0] + h * p.ks[1];
  const unsigned short* V = (const unsigned short*)p.v + b * p.vs[0] + h * p.vs[1];
  const int r0 = warp * 16;

  // This warp's 16 query rows as A fragments, staged through ks.
  unsigned qf[KD / 16][4];
  kiln_load_tile(ks, Q, p.qs[2], q0, p.sq);
  kiln_copies_wait();
  __syncthreads();
#pragma unroll
  for (int kk = 0; kk < KD / 16; ++kk) {
    const unsigned short* at = ks + (r0 + g) * STRIDE + kk * 16 + 2 * t;
    qf[kk][0] = *(const unsigned*)at;
    qf[kk][1] = *(const unsigned*)(at + 8 * STRIDE);
    qf[kk][2] = *(const unsigned*)(at + 8);
    qf[kk][3] = *(const unsigned*)(at + 8 * STRIDE + 8);
  }
  __syncthreads();

  i64 key_end = p.sk;
  if (p.causal && q0 + BR < key_end) key_end = q0 + BR;  // keys after the block's last query
  const int key_blocks = (int)((key_end + BC - 1) / BC);
  float o[KD / 8][4];
#pragma unroll
  for (int d = 0; d < KD / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};
  if (key_blocks > 0) kiln_load_tile(ks, K, p.ks[2], 0, p.sk);

  for (int j = 0; j < key_blocks; ++j) {
    const i64 k0 = (i64)j * BC;
    kiln_copies_wait();  // k of this block is in; every warp is done with the last v
    __syncthreads();
    kiln_load_tile(vs, V, p.vs[2], k0, p.sk);

    float s[BC / 8][4];
#pragma unroll
    for (int n = 0; n < BC / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
    // B fragments of kᵀ for two key tiles at once: lanes 0-7 address keys n*8.. at dims
    // kk*16.., lanes 8-15 the same keys at dims kk*16+8.., lanes 16-31 the next 8 keys.
    const int key_lane = (lane >> 4) * 8 + (lane & 7), dim_lane = ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int kk = 0; kk < KD / 16; ++kk) {
#pragma unroll
      for (int n = 0; n < BC / 8; n += 2) {
        unsigned f[4];
        kiln_ldsm(f, kiln_smem(ks + (n * 8 + key_lane) * STRIDE + kk * 16 + dim_lane));
        kiln_mma(s[n], qf[kk], f[0], f[1]);
        kiln_mma(s[n + 1], qf[kk], f[2], f[3]);
      }
    }

    // Scores in base 2, excluded ones -inf; the block's maximum of each of the two rows.
    float block_max[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int n = 0; n < BC / 8; ++n) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const i64 qi = q0 + r0 + g + (c >> 1) * 8;
        const i64 kj = k0 + n * 8 + 2 * t + (c & 1);
        float x = s[n][c] * p.scale_log2;
        bool excluded = kj >= p.sk || (p.causal && kj > qi);
#if HAS_MASK || HAS_BIAS
        if (!excluded && qi < p.sq) {
#if HAS_MASK
          excluded = ((const unsigned char*)p.mask)[b * p.ms[0] + h * p.ms[1] + qi * p.ms[2] +
                                                    kj * p.ms[3]] != 0;
#endif
#if HAS_BIAS
          x += LOAD_BIAS(((const unsigned short*)p.bias)[b * p.bs[0] + h * p.bs[1] +
                                                         qi * p.bs[2] + kj * p.bs[3]]) *
               1.4426950408889634f;
#endif
        }
#endif
        s[n][c] = excluded ? kNegInf : x;
        block_max[c >> 1] = kiln_max(block_max[c >> 1], s[n][c]);
      }
    }
    float rescale[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      block_max[r] = kiln_max(block_max[r], __shfl_xor_sync(0xffffffffu, block_max[r], 1));
      block_max[r] = kiln_max(block_max[r], __shfl_xor_sync(0xffffffffu, block_max[r], 2));
      const float next = kiln_max(m[r], block_max[r]);
      // next = -inf: every key so far is excluded and nothing has been accumulated.
      rescale[r] = next == kNegInf ? 1.f : exp2f(m[r] - next);
      m[r] = next;
      l[r] *= rescale[r];
    }
#pragma unroll
    for (int n = 0; n < BC / 8; ++n) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = c >> 1;
        const float e = m[r] == kNegInf ? 0.f : exp2f(s[n][c] - m[r]);
        s[n][c] = e;
        l[r] += e;
      }
    }
#pragma unroll
    for (int d = 0; d < KD / 8; ++d) {
      o[d][0] *= rescale[0];
      o[d][1] *= rescale[0];
      o[d][2] *= rescale[1];
      o[d][3] *= rescale[1];
    }

    kiln_copies_wait();  // v of this block is in; every warp is done with k
    __syncthreads();
    if (j + 1 < key_blocks) kiln_load_tile(ks, K, p.ks[2], k0 + BC, p.sk);
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      const unsigned a[4] = {kiln_pack(s[2 * kk][0], s[2 * kk][1]),
                             kiln_pack(s[2 * kk][2], s[2 * kk][3]),
                             kiln_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             kiln_pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      const int key = kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
      for (int d = 0; d < KD / 8; d += 2) {
        unsigned f[4];
        kiln_ldsm_t(f, kiln_smem(vs + key * STRIDE + d * 8 + (lane >> 4) * 8));
        kiln_mma(o[d], a, f[0], f[1]);
        kiln_mma(o[d + 1], a, f[2], f[3]);
      }
    }
  }

  // The row sums over the quad; rows with every key excluded (sum 0) give zeros.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  unsigned short* out = (unsigned short*)p.out + bh * p.sq * KD;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const i64 qi = q0 + r0 + g + r * 8;
    if (qi >= p.sq) continue;
    const float inverse = l[r] == 0.f ? 0.f : 1.f / l[r];
    unsigned* row = (unsigned*)(out + qi * KD);
#pragma unroll
    for (int d = 0; d < KD / 8; ++d)
      row[d * 4 + t] = kiln_pack(o[d][2 * r] * inverse, o[d][2 * r + 1] * inverse);
  }
}
)CUDA";

}  // namespace

bool attention_kernel_applies(DType dtype, std::int64_t depth) {
  return (dtype == DType::BF16 || dtype == DType::F16) && depth > 0 && depth <= 128 &&
         depth % 16 == 0;
}

std::string attention_kernel_source(DType dtype, std::int64_t depth, bool mask, bool bias) {
  const bool bf16 = dtype == DType::BF16;
  std::string source = kernel_prelude();
  source += "#define KD " + std::to_string(depth) + "\n";
  source += std::string("#define ELEM \"") + (bf16 ? "bf16" : "f16") + "\"\n";
  source += std::string("#define LOAD_BIAS(x) ") + (bf16 ? "k_b2f(x)" : "k_h2f(x)") + "\n";
  source += std::string("#define HAS_MASK ") + (mask ? "1" : "0") + "\n";
  source += std::string("#define HAS_BIAS ") + (bias ? "1" : "0") + "\n";
  source += kAttentionKernel;
  return source;
}

}  // namespace kiln::cuda
