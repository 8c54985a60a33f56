// Checks kiln's reading of Hopper's wgmma operand layouts before a kernel relies on them: one
// warpgroup computes S = A B1^T (A and B1 from shared memory, both K-major, 128-byte swizzle)
// and O = bf16(S) B2 (the weights from registers in the accumulator's layout, B2 MN-major:
// stored as [key][d] like B1 and read transposed), for each candidate (LBO, SBO) of B2's
// descriptor, against loops on the host. A probe run on the GPU machine; not part of the build.
//   nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a wgmma_layout.cu -o wgmma_layout
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

constexpr int kM = 64, kN = 128, kK = 128;  // rows of A, keys, depth

// Byte offset of (row, col) in a [rows][128] bf16 tile kept as two 64-column halves, each row
// 128 bytes with its 16-byte chunks swizzled by the row's low three bits.
__host__ __device__ inline uint32_t swizzled(int rows, int row, int col) {
  const int half = col / 64, within = col % 64;
  return half * rows * 128 + row * 128 + (((within / 8) ^ (row % 8)) * 16) + (within % 8) * 2;
}

__device__ inline uint64_t descriptor(uint32_t address, uint32_t lbo, uint32_t sbo) {
  return uint64_t((address & 0x3FFFF) >> 4) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

__device__ inline void mma_ss(float* d, uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(a), "l"(b), "r"(accumulate));
}

__device__ inline void mma_rs(float* d, const uint32_t* a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}

__device__ inline uint32_t pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__global__ void __launch_bounds__(128)
    probe(const __nv_bfloat16* a, const __nv_bfloat16* b1, const __nv_bfloat16* b2, float* s,
          float* o, uint32_t lbo, uint32_t sbo) {
  extern __shared__ unsigned char raw[];
  const uint32_t raw_address = static_cast<uint32_t>(__cvta_generic_to_shared(raw));
  const uint32_t base = (raw_address + 1023) & ~1023u;
  unsigned char* tile = raw + (base - raw_address);
  const uint32_t a_at = 0, b1_at = kM * kK * 2, b2_at = b1_at + kN * kK * 2;
  const int t = threadIdx.x;
  for (int i = t; i < kM * kK; i += 128) {
    *reinterpret_cast<__nv_bfloat16*>(tile + a_at + swizzled(kM, i / kK, i % kK)) = a[i];
  }
  for (int i = t; i < kN * kK; i += 128) {
    *reinterpret_cast<__nv_bfloat16*>(tile + b1_at + swizzled(kN, i / kK, i % kK)) = b1[i];
    *reinterpret_cast<__nv_bfloat16*>(tile + b2_at + swizzled(kN, i / kK, i % kK)) = b2[i];
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  float d[64];
  for (int i = 0; i < 64; ++i) d[i] = 0.f;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  for (int kk = 0; kk < kK / 16; ++kk) {
    const uint32_t step = (kk % 4) * 32;  // 16 columns further within the half
    mma_ss(d, descriptor(base + a_at + (kk / 4) * kM * 128 + step, 16, 1024),
           descriptor(base + b1_at + (kk / 4) * kN * 128 + step, 16, 1024), kk > 0);
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  const int warp = t / 32, lane = t % 32, g = lane / 4, c = lane % 4;
  for (int j = 0; j < 16; ++j) {
    const int row = 16 * warp + g, col = 8 * j + 2 * c;
    s[row * kN + col] = d[4 * j];
    s[row * kN + col + 1] = d[4 * j + 1];
    s[(row + 8) * kN + col] = d[4 * j + 2];
    s[(row + 8) * kN + col + 1] = d[4 * j + 3];
  }
  uint32_t p[32];
  for (int kk = 0; kk < 8; ++kk) {
    p[4 * kk] = pack(d[8 * kk], d[8 * kk + 1]);
    p[4 * kk + 1] = pack(d[8 * kk + 2], d[8 * kk + 3]);
    p[4 * kk + 2] = pack(d[8 * kk + 4], d[8 * kk + 5]);
    p[4 * kk + 3] = pack(d[8 * kk + 6], d[8 * kk + 7]);
  }
  float e[64];
  for (int i = 0; i < 64; ++i) e[i] = 0.f;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  for (int kk = 0; kk < kN / 16; ++kk) {
    mma_rs(e, p + 4 * kk, descriptor(base + b2_at + kk * 16 * 128, lbo, sbo), kk > 0);
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  for (int j = 0; j < 16; ++j) {
    const int row = 16 * warp + g, col = 8 * j + 2 * c;
    o[row * kK + col] = e[4 * j];
    o[row * kK + col + 1] = e[4 * j + 1];
    o[(row + 8) * kK + col] = e[4 * j + 2];
    o[(row + 8) * kK + col + 1] = e[4 * j + 3];
  }
}

static float round_bf16(float x) {  // round to nearest even, as cvt.rn.bf16
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  u &= 0xFFFF0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

#define CHECK(call)                                           \
  do {                                                        \
    cudaError_t e_ = (call);                                  \
    if (e_ != cudaSuccess) {                                  \
      std::printf("%s: %s\n", #call, cudaGetErrorString(e_)); \
      return 1;                                               \
    }                                                         \
  } while (0)

int main() {
  std::vector<float> a(kM * kK), b1(kN * kK), b2(kN * kK);
  uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return float(int(state >> 28) - 8) / 4.f;  // exact in bf16
  };
  for (auto& x : a) x = next();
  for (auto& x : b1) x = next();
  for (auto& x : b2) x = next();
  std::vector<__nv_bfloat16> ha(a.size()), hb1(b1.size()), hb2(b2.size());
  for (size_t i = 0; i < a.size(); ++i) ha[i] = __float2bfloat16(a[i]);
  for (size_t i = 0; i < b1.size(); ++i)
    hb1[i] = __float2bfloat16(b1[i]), hb2[i] = __float2bfloat16(b2[i]);
  std::vector<double> s(kM * kN), o(kM * kK, 0.0);
  for (int i = 0; i < kM; ++i)
    for (int n = 0; n < kN; ++n) {
      double sum = 0;
      for (int k = 0; k < kK; ++k) sum += double(a[i * kK + k]) * b1[n * kK + k];
      s[i * kN + n] = sum;
    }
  for (int i = 0; i < kM; ++i)
    for (int n = 0; n < kN; ++n) {
      const double p = round_bf16(float(s[i * kN + n]));
      for (int k = 0; k < kK; ++k) o[i * kK + k] += p * b2[n * kK + k];
    }
  __nv_bfloat16 *da, *db1, *db2;
  float *ds, *dout;
  CHECK(cudaMalloc(&da, ha.size() * 2));
  CHECK(cudaMalloc(&db1, hb1.size() * 2));
  CHECK(cudaMalloc(&db2, hb2.size() * 2));
  CHECK(cudaMalloc(&ds, s.size() * 4));
  CHECK(cudaMalloc(&dout, o.size() * 4));
  CHECK(cudaMemcpy(da, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db1, hb1.data(), hb1.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db2, hb2.data(), hb2.size() * 2, cudaMemcpyHostToDevice));
  const int shared = 1024 + (kM * kK + 2 * kN * kK) * 2;
  CHECK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, shared));
  const uint32_t candidates[][2] = {
      {kN * 128, 1024}, {1024, kN * 128}, {64 * 128, 1024}, {1024, 64 * 128}};
  for (const auto& candidate : candidates) {
    CHECK(cudaMemset(ds, 0xff, s.size() * 4));
    CHECK(cudaMemset(dout, 0xff, o.size() * 4));
    probe<<<1, 128, shared>>>(da, db1, db2, ds, dout, candidate[0], candidate[1]);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::vector<float> gs(s.size()), go(o.size());
    CHECK(cudaMemcpy(gs.data(), ds, gs.size() * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(go.data(), dout, go.size() * 4, cudaMemcpyDeviceToHost));
    int bad_s = 0, bad_o = 0;
    for (size_t i = 0; i < s.size(); ++i)
      bad_s += !(std::fabs(gs[i] - s[i]) <= 1e-3 * (1 + std::fabs(s[i])));
    for (size_t i = 0; i < o.size(); ++i)
      bad_o += !(std::fabs(go[i] - o[i]) <= 1e-3 * (1 + std::fabs(o[i])));
    std::printf(
        "wgmma layout: B2 LBO %5u SBO %5u: S %s (%d of %zu wrong), O %s (%d of %zu wrong)\n",
        candidate[0], candidate[1], bad_s ? "WRONG" : "ok", bad_s, s.size(), bad_o ? "WRONG" : "ok",
        bad_o, o.size());
  }
  return 0;
}
