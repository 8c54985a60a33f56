// The thin products of skinny_matmul.h: three kernels, and a fourth that adds split sums.
//   columns_by_warp    n <= 16, A's rows contiguous (x · w): the block stages a tile of B in
//                      shared memory as [j][k]; each warp takes two rows of A, its lanes along k,
//                      so a load of A and a read of the tile are consecutive addresses; the warp
//                      adds its lanes' sums at the end.
//   columns_by_thread  n <= 16, A's columns contiguous (hᵀ · dy): a thread per row of C, the
//                      threads of a warp on neighbouring rows (A read coalesced), every thread
//                      reading the same word of the staged tile of B at once.
//   short_sums         k <= 16 < n, C's rows contiguous (dy · wᵀ): the block stages 32 rows of A
//                      and 256 columns of B; a thread per column writes its 32 outputs, a warp's
//                      stores side by side.
// The column kernels split k over blockIdx.y where the blocks would not fill the SMs; the splits
// write their sums to the workspace as [split][batch][j][i], and add_splits adds them in split
// order. (A first version read B straight from global memory, each lane its own row of B: ten
// cache lines a load, slower than cuBLASLt; docs/cuda-backend-notes.md, session 62.)
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "backends/cuda/check.h"
#include "backends/cuda/lib/device_math.cuh"
#include "backends/cuda/lib/matmul_epilogue.h"
#include "backends/cuda/lib/skinny_matmul.h"

namespace kiln::cuda::lib {

namespace {

constexpr int kMaxThin = 16;
constexpr int kBlock = 256;  // columns_by_warp, short_sums, add_splits
constexpr int kWarps = kBlock / 32;
constexpr int kRowsPerWarp = 2;
constexpr int kTileK = 256;          // columns_by_warp's tile of k
constexpr int kThreadBlock = 128;    // columns_by_thread
constexpr int kThreadTileK = 64;     // columns_by_thread's tile of k
constexpr int kMinThreadSplit = 16;  // terms of k a split of columns_by_thread sums at least
constexpr int kShortRows = 32;
constexpr int kShortColumns = kBlock;

struct Params {
  std::int64_t m, n, k, batch;
  std::int64_t a_rs, a_cs, a_bs;
  std::int64_t b_rs, b_cs, b_bs;
  std::int64_t c_rs, c_cs, c_bs;
  std::int64_t k_chunk;  // terms of k per split
  std::int64_t splits;
  double alpha, beta;  // alpha 1 and no addend unless the epilogue is None (matmul.h)
  Activation activation;
};

template <class T>
struct Operands {
  const T* a;
  const T* b;
  T* c;
  const T* bias;    // n elements, or null
  const T* addend;  // in C's layout, or null
};

__device__ std::int64_t smaller(std::int64_t x, std::int64_t y) { return x < y ? x : y; }

// tile[r * tile_rs + c * tile_cs] = M(r, c) for r < rows, c < cols, where M(r, c) is at
// base[r * rs + c * cs]; the block's threads walk M along its contiguous axis (coalesced reads).
template <class T, class Acc>
__device__ void stage(Acc* tile, int tile_rs, int tile_cs, const T* base, std::int64_t rs,
                      std::int64_t cs, int rows, int cols) {
  const bool cols_inner = cs == 1 || rs != 1;
  for (int e = static_cast<int>(threadIdx.x); e < rows * cols; e += static_cast<int>(blockDim.x)) {
    const int r = cols_inner ? e / cols : e % rows;
    const int c = cols_inner ? e % cols : e / rows;
    tile[r * tile_rs + c * tile_cs] = Compute<T>::load(base[r * rs + c * cs]);
  }
}

// C[bi, i, j] from its sum: bias, activation, alpha and the addend (cuBLASLt's order), stored.
template <class T, class Acc>
__device__ void finish(const Params& p, const Operands<T>& o, std::int64_t bi, std::int64_t i,
                       std::int64_t j, Acc sum) {
  const std::int64_t at = bi * p.c_bs + i * p.c_rs + j * p.c_cs;
  if (o.bias != nullptr) sum += Compute<T>::load(o.bias[j]);
  sum = activate(sum, p.activation) * static_cast<Acc>(p.alpha);
  if (o.addend != nullptr) sum += static_cast<Acc>(p.beta) * Compute<T>::load(o.addend[at]);
  o.c[at] = Compute<T>::store(sum);
}

// A column kernel's sum of (bi, i, j): finished into C, or its split's partial sum.
template <class T, bool kPartial, class Acc>
__device__ void store(const Params& p, const Operands<T>& o, Acc* partials, std::int64_t bi,
                      std::int64_t i, std::int64_t j, Acc sum) {
  if constexpr (kPartial) {
    partials[((static_cast<std::int64_t>(blockIdx.y) * p.batch + bi) * p.n + j) * p.m + i] = sum;
  } else {
    finish(p, o, bi, i, j, sum);
  }
}

template <class T, bool kPartial>
__global__ void __launch_bounds__(kBlock)
    columns_by_warp(Params p, Operands<T> o, typename Compute<T>::type* partials) {
  using Acc = typename Compute<T>::type;
  __shared__ Acc tile[kMaxThin * kTileK];  // B(k0 + kt, j) at tile[j * kTileK + kt]
  const int lane = static_cast<int>(threadIdx.x % 32);
  const std::int64_t bi = blockIdx.z;
  const std::int64_t i0 =
      (static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * kRowsPerWarp;
  const std::int64_t k_begin = static_cast<std::int64_t>(blockIdx.y) * p.k_chunk;
  const std::int64_t k_end = smaller(p.k, k_begin + p.k_chunk);
  const T* a = o.a + bi * p.a_bs;  // a_cs is 1
  const T* b = o.b + bi * p.b_bs;
  const int n = static_cast<int>(p.n);
  Acc sum[kRowsPerWarp][kMaxThin] = {};
  for (std::int64_t k0 = k_begin; k0 < k_end; k0 += kTileK) {
    const int count = static_cast<int>(smaller(kTileK, k_end - k0));
    __syncthreads();  // every warp is done with the last tile
    stage<T>(tile, 1, kTileK, b + k0 * p.b_rs, p.b_rs, p.b_cs, count, n);
    __syncthreads();
#pragma unroll 4
    for (int kt = lane; kt < count; kt += 32) {
      Acc x[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        x[r] = i0 + r < p.m ? Compute<T>::load(a[(i0 + r) * p.a_rs + k0 + kt]) : Acc(0);
      }
#pragma unroll
      for (int j = 0; j < kMaxThin; ++j) {
        if (j < n) {
          const Acc w = tile[j * kTileK + kt];
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r) sum[r][j] += x[r] * w;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int j = 0; j < kMaxThin; ++j) {
      if (j < n) {
        for (int offset = 16; offset > 0; offset /= 2) {
          sum[r][j] += __shfl_xor_sync(0xffffffffu, sum[r][j], offset);
        }
      }
    }
    // Lane j stores column j (constant indices into sum: it stays in registers).
#pragma unroll
    for (int j = 0; j < kMaxThin; ++j) {
      if (j < n && lane == j && i0 + r < p.m) {
        store<T, kPartial>(p, o, partials, bi, i0 + r, j, sum[r][j]);
      }
    }
  }
}

template <class T, bool kPartial>
__global__ void __launch_bounds__(kThreadBlock)
    columns_by_thread(Params p, Operands<T> o, typename Compute<T>::type* partials) {
  using Acc = typename Compute<T>::type;
  __shared__ Acc tile[kThreadTileK * kMaxThin];  // B(k0 + l, j) at tile[l * kMaxThin + j]
  const std::int64_t bi = blockIdx.z;
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreadBlock + threadIdx.x;
  const bool active = i < p.m;
  const std::int64_t k_begin = static_cast<std::int64_t>(blockIdx.y) * p.k_chunk;
  const std::int64_t k_end = smaller(p.k, k_begin + p.k_chunk);
  const T* a = o.a + bi * p.a_bs + (active ? i : 0) * p.a_rs;
  const T* b = o.b + bi * p.b_bs;
  const int n = static_cast<int>(p.n);
  Acc sum[kMaxThin] = {};
  for (std::int64_t k0 = k_begin; k0 < k_end; k0 += kThreadTileK) {
    const int count = static_cast<int>(smaller(kThreadTileK, k_end - k0));
    __syncthreads();
    stage<T>(tile, kMaxThin, 1, b + k0 * p.b_rs, p.b_rs, p.b_cs, count, n);
    __syncthreads();
    if (!active) continue;
#pragma unroll 8
    for (int l = 0; l < count; ++l) {
      const Acc x = Compute<T>::load(a[(k0 + l) * p.a_cs]);
#pragma unroll
      for (int j = 0; j < kMaxThin; ++j) {
        if (j < n) sum[j] += x * tile[l * kMaxThin + j];
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int j = 0; j < kMaxThin; ++j) {
    if (j < n) store<T, kPartial>(p, o, partials, bi, i, j, sum[j]);
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    add_splits(Params p, Operands<T> o, const typename Compute<T>::type* partials) {
  using Acc = typename Compute<T>::type;
  const std::int64_t total = p.batch * p.n * p.m;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * kBlock;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * kBlock + threadIdx.x; e < total;
       e += step) {
    Acc sum = 0;
    for (std::int64_t s = 0; s < p.splits; ++s) sum += partials[s * total + e];
    const std::int64_t r = e / p.m;
    finish(p, o, r / p.n, e % p.m, r % p.n, sum);
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock) short_sums(Params p, Operands<T> o) {
  using Acc = typename Compute<T>::type;
  __shared__ Acc bt[kMaxThin * kShortColumns];  // B(l, j0 + t) at bt[l * kShortColumns + t]
  __shared__ Acc at[kShortRows * kMaxThin];     // A(i0 + r, l) at at[r * kMaxThin + l]
  const std::int64_t bi = blockIdx.z;
  const std::int64_t j0 = static_cast<std::int64_t>(blockIdx.x) * kShortColumns;
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.y) * kShortRows;
  const int k = static_cast<int>(p.k);
  const int columns = static_cast<int>(smaller(kShortColumns, p.n - j0));
  const int rows = static_cast<int>(smaller(kShortRows, p.m - i0));
  stage<T>(bt, kShortColumns, 1, o.b + bi * p.b_bs + j0 * p.b_cs, p.b_rs, p.b_cs, k, columns);
  stage<T>(at, kMaxThin, 1, o.a + bi * p.a_bs + i0 * p.a_rs, p.a_rs, p.a_cs, rows, k);
  __syncthreads();
  const int t = static_cast<int>(threadIdx.x);
  if (t >= columns) return;
  for (int r = 0; r < rows; ++r) {
    Acc sum = 0;
    for (int l = 0; l < k; ++l) sum += at[r * kMaxThin + l] * bt[l * kShortColumns + t];
    finish(p, o, bi, i0 + r, j0 + t, sum);
  }
}

// Off until measured faster than cuBLASLt on a GPU (docs/cuda-backend-notes.md, session 62).
bool enabled() {
  const char* value = std::getenv("KILN_CUDA_SKINNY");
  return value != nullptr && std::string_view(value) == "1";
}

std::int64_t ceil_div(std::int64_t x, std::int64_t y) { return (x + y - 1) / y; }

template <class T>
void run(const MatmulDesc& d, const MatmulArgs& args, void* workspace, std::size_t workspace_bytes,
         std::int64_t sms, cudaStream_t stream) {
  using Acc = typename Compute<T>::type;
  Params p{};
  p.m = d.m;
  p.n = d.n;
  p.k = d.k;
  p.batch = d.batch;
  p.a_rs = d.a.row_stride;
  p.a_cs = d.a.col_stride;
  p.a_bs = d.a.batch_stride;
  p.b_rs = d.b.row_stride;
  p.b_cs = d.b.col_stride;
  p.b_bs = d.b.batch_stride;
  p.c_rs = d.c.row_stride;
  p.c_cs = d.c.col_stride;
  p.c_bs = d.c.batch_stride;
  p.activation = activation_of(d.epilogue);
  p.alpha = args.alpha;
  p.beta = args.beta;
  Operands<T> o{static_cast<const T*>(args.a), static_cast<const T*>(args.b),
                static_cast<T*>(args.c),
                has_bias(d.epilogue) ? static_cast<const T*>(args.bias) : nullptr,
                // As cuBLASLt, the addend is not read where beta is 0 (it may hold anything).
                args.beta != 0.0 ? static_cast<const T*>(args.addend) : nullptr};
  const auto batch = static_cast<unsigned>(d.batch);
  if (d.n > kMaxThin) {
    const dim3 grid(static_cast<unsigned>(ceil_div(d.n, kShortColumns)),
                    static_cast<unsigned>(ceil_div(d.m, kShortRows)), batch);
    short_sums<T><<<grid, kBlock, 0, stream>>>(p, o);
    KILN_CUDA_CHECK("matmul", cudaGetLastError());
    return;
  }
  // The column kernels: k split until the blocks fill the SMs (each split at least a tile, or
  // kMinThreadSplit terms), as far as the partial sums fit the workspace.
  const bool by_warp = d.a.col_stride == 1;
  const std::int64_t row_blocks = ceil_div(d.m, by_warp ? kWarps * kRowsPerWarp : kThreadBlock);
  const std::int64_t blocks = row_blocks * d.batch;
  // A warp kernel's block is 16 rows with many loads in flight: a wave of them fills the GPU.
  // A thread kernel's block is four warps with fewer: four to an SM.
  const std::int64_t wanted = by_warp ? sms : 4 * sms;
  std::int64_t splits = 1;
  if (blocks < wanted) {
    splits = std::min(ceil_div(wanted, blocks), ceil_div(d.k, by_warp ? kTileK : kMinThreadSplit));
    const std::int64_t split_bytes = d.batch * d.m * d.n * static_cast<std::int64_t>(sizeof(Acc));
    splits = std::clamp<std::int64_t>(static_cast<std::int64_t>(workspace_bytes) / split_bytes, 1,
                                      splits);
    splits = std::min<std::int64_t>(splits, 65535);  // gridDim.y
  }
  p.k_chunk = ceil_div(d.k, splits);
  p.splits = ceil_div(d.k, p.k_chunk);  // none empty
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(p.splits), batch);
  Acc* partials = static_cast<Acc*>(workspace);
  const bool split = p.splits > 1;
  if (by_warp) {
    if (split) {
      columns_by_warp<T, true><<<grid, kBlock, 0, stream>>>(p, o, partials);
    } else {
      columns_by_warp<T, false><<<grid, kBlock, 0, stream>>>(p, o, partials);
    }
  } else if (split) {
    columns_by_thread<T, true><<<grid, kThreadBlock, 0, stream>>>(p, o, partials);
  } else {
    columns_by_thread<T, false><<<grid, kThreadBlock, 0, stream>>>(p, o, partials);
  }
  KILN_CUDA_CHECK("matmul", cudaGetLastError());
  if (!split) return;
  const std::int64_t sums =
      std::clamp<std::int64_t>(ceil_div(d.batch * d.m * d.n, kBlock), 1, sms * 16);
  add_splits<T><<<static_cast<unsigned>(sums), kBlock, 0, stream>>>(p, o, partials);
  KILN_CUDA_CHECK("matmul", cudaGetLastError());
}

}  // namespace

bool skinny_product(const MatmulDesc& d) {
  if (d.k <= 0 || d.batch > 65535) return false;
  // The shape first: the environment is read for thin products only.
  const bool thin = d.n <= kMaxThin ? d.a.col_stride == 1 || d.a.row_stride == 1
                                    : d.k <= kMaxThin && d.c.col_stride == 1 &&
                                          ceil_div(d.m, kShortRows) <= 65535;
  return thin && enabled();
}

void skinny_matmul(const MatmulDesc& desc, const MatmulArgs& args, void* workspace,
                   std::size_t workspace_bytes, int sms, cudaStream_t stream) {
  const std::int64_t count = std::max(sms, 1);
  switch (desc.dtype) {
    case DType::F64:
      return run<double>(desc, args, workspace, workspace_bytes, count, stream);
    case DType::F32:
      return run<float>(desc, args, workspace, workspace_bytes, count, stream);
    case DType::F16:
      return run<__half>(desc, args, workspace, workspace_bytes, count, stream);
    case DType::BF16:
      return run<__nv_bfloat16>(desc, args, workspace, workspace_bytes, count, stream);
    default:
      break;
  }
  detail::fail<UnsupportedDType>("matmul", "no product kernel for dtype ", dtype_name(desc.dtype));
}

}  // namespace kiln::cuda::lib
