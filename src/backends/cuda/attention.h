// Scaled dot-product attention as generated kernels (flash attention: cuda_attention.cpp runs
// them, attention_source.cpp writes their entries around the bodies in attention_kernels.h, which
// says how they work): the forward pass, and for its gradients the statistics of each query row,
// dq, and dk with dv. The [Sq, Sk] matrix never exists; a row whose every key is excluded gives
// zeros (and no gradient), a NaN score a NaN row, as the default.
#pragma once

#include <cstdint>
#include <string>

#include "backends/cuda/attention_hopper.h"
#include "backends/cuda/attention_kernels.h"
#include "backends/cuda/attention_simt.h"
#include "kiln/dtype.h"

namespace kiln::cuda {

inline constexpr int kAttentionKeys = attention_kernels::kKaKeys;  // rows per backward block
using AttentionParams = attention_kernels::KaParams;

enum class AttentionKernel {
  Forward,   // kiln_attention: the output
  Stats,     // kiln_attention_stats: {L, D} of every query row, for the two below
  Query,     // kiln_attention_dq: dq
  KeyValue,  // kiln_attention_dkv: dk and dv
  // The four on Hopper's warpgroup products (attention_hopper.h; sm_90a, head dims 64 and 128):
  // kiln_attention_wg, kiln_attention_wg_stats, kiln_attention_wg_dq, kiln_attention_wg_dkv.
  HopperForward,
  HopperStats,
  HopperQuery,
  HopperKeyValue,
  // kiln_attention_wg_pipelined: the forward pass with each warpgroup's products overlapped with
  // its softmax (KILN_ATTENTION_WGMMA=2 until timed).
  HopperPipelined,
  // kiln_attention_delta: D of every query row into statistics whose L the forward pass wrote
  // (the forward kernels write L with their output when given p.stats): Stats without scores.
  Delta,
  // kiln_attention_wg_dqkv: HopperKeyValue with dq added to a zeroed f32 buffer by reductions,
  // in place of HopperQuery (which recomputes S and dP for it).
  HopperQueryKeyValue,
};

// True where the kernels run attention of dtype with head dim `depth` (bf16 or f16; depth a
// multiple of 16 up to 128).
bool attention_kernel_applies(DType dtype, std::int64_t depth);
// True where the Hopper kernels take attention and its gradients of head dim `depth` on
// a device of compute capability major.minor (9.0 exactly: wgmma is sm_90a's), unless
// KILN_ATTENTION_WGMMA=0 asks for the mma.sync kernels.
bool attention_hopper_applies(int major, int minor, std::int64_t depth);
// True where KILN_ATTENTION_WGMMA=2 asks for the pipelined Hopper forward pass.
bool attention_hopper_pipelined();
// True unless KILN_ATTENTION_MERGED_DQ=0: the Hopper dk/dv kernel computes dq too
// (HopperQueryKeyValue) where the forward's output carries it to attention_query_backward,
// sparing the dq kernel's second S and dP products for f32 reductions into dq (forward and
// backward at S 4096: 7.13 -> 6.37 ms on an H200, 7.15 -> 7.40 ms on an H100, whose lower
// bandwidth the reductions feel; causal 4.16 -> 3.70 ms on the H100).
bool attention_query_merged();
// True where an f32 kernel (attention_simt.h) runs attention of dtype with head dim `depth`:
// f32, depth a multiple of 4 up to 64.
bool attention_simt_applies(DType dtype, std::int64_t depth);
// Keys of the row-a-thread kernel's shared tiles: 16, or KILN_ATTENTION_F32_KEYS (16, 32 or 64).
int attention_simt_keys();
// One of the f32 kernels for a head dim: the tiled one (head dims 32 and 64) or the
// row-a-thread one (tiles of `keys` keys); a block's threads, query rows and dynamic shared bytes.
struct SimtKernel {
  bool tiled = false;
  int keys = 0;
  int threads = 0;
  int rows = 0;
  unsigned shared_bytes = 0;
  int min_blocks = 0;  // blocks an SM must hold at once (__launch_bounds__), 0: no bound
};
// The kernel asked for: tiled where the head dim allows unless KILN_ATTENTION_F32_TILED=0, tiles
// of attention_simt_keys() keys otherwise.
SimtKernel attention_simt_kernel(std::int64_t depth);
// A given one (tests): tiled (the head dim must allow it) or with tiles of `keys` keys.
SimtKernel attention_simt_kernel(std::int64_t depth, bool tiled, int keys);
// Its source for head dim depth, with a mask and a bias or without.
// dropout: the body that drops weights (KaParams' dropout fields).
std::string attention_simt_source(const SimtKernel& kernel, std::int64_t depth, bool mask,
                                  bool bias, bool dropout = false);
inline constexpr const char* kAttentionSimtName = "kiln_attention_f32";
// A kernel's source: inputs of dtype, head dim depth, with a mask (bool) and a bias (of dtype)
// or without.
// Whether the kernel has a body with dropout (the forward, dq and dk/dv kernels of either family;
// not the statistics, delta or pipelined ones).
bool attention_kernel_drops(AttentionKernel kernel);
// dropout: the body with dropout (UnsupportedOperation where the kernel has none).
std::string attention_kernel_source(AttentionKernel kernel, DType dtype, std::int64_t depth,
                                    bool mask, bool bias, bool dropout = false);
// The kernel's extern "C" name in its source.
const char* attention_kernel_name(AttentionKernel kernel);
// A kernel's block: its threads, the rows (queries, or keys for KeyValue) it takes, and its
// dynamic shared memory for head dim depth.
int attention_kernel_threads(AttentionKernel kernel);
int attention_kernel_rows(AttentionKernel kernel);
unsigned attention_shared_bytes(AttentionKernel kernel, std::int64_t depth);

}  // namespace kiln::cuda
