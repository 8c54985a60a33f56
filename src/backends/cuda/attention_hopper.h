// Flash attention's forward pass on Hopper's warpgroup tensor-core products (wgmma, sm_90a): one
// text for NVRTC and for the host tests, after attention_kernels.h (whose online softmax, score
// preparation and stores it shares) like that header's bodies. Under NVRTC the primitives are
// PTX's; on the host they are declared here and defined on the emulated grid
// (tests/gpu/kernel_emulator.h), which reads the operands through the same descriptors.
//
// A block of 2 warpgroups (8 warps) takes 128 query rows of one (batch, head), 64 a warpgroup and
// 16 a warp; keys go by in tiles of 128 through two shared stages (tile j + 2's cp.async copies in
// flight while tile j is used). Per tile each warpgroup makes its 64 x 128 scores with one
// chain of wgmma (q and k both read from shared memory by descriptor), takes the online softmax
// step in registers with the mma.sync kernel's helpers (a wgmma accumulator is, per warp, the
// same fragments as mma.m16n8's C tiles side by side), and adds the weights times v with a
// second chain whose left operand is the weights in registers (the accumulator's layout is the
// A operand's) and whose right is v read transposed from shared memory. Head dims 64 and 128.
//
// Shared tiles are kept as wgmma's 128-byte-swizzled canonical layout: a [rows, KD] tile as KD /
// 64 panels of [rows, 64], a row of a panel 128 bytes whose 16-byte chunks are permuted by
// chunk ^ (row % 8), each tile 1024-byte aligned (the swizzle reads address bits 4-9). For q and
// k (K-major operands: the reduced dim contiguous) a descriptor starts at a panel's first row
// (+32 bytes per 16 reduced elements), 8-row groups 1024 bytes apart (SBO); for v (MN-major: the
// output dim contiguous, read transposed) it starts at the 16 keys' first row, 8-key groups 1024
// bytes apart (SBO) and the 64-wide panels of the output dim a panel's size apart (LBO).
// bench/probe/wgmma_layout.cu checks these readings on the GPU.
#ifndef KILN_CUDA_ATTENTION_HOPPER_H
#define KILN_CUDA_ATTENTION_HOPPER_H

#ifndef __CUDACC_RTC__
#include "backends/cuda/attention_kernels.h"
#endif

namespace kiln::cuda::attention_kernels {

inline constexpr int kKhRows = 128;  // query rows of a block: 64 a warpgroup, 16 a warp
inline constexpr int kKhKeys = 128;  // keys of a tile
inline constexpr int kKhThreads = 256;

// Whether the Hopper kernel takes head dim `depth` (whole 64-element panels, at most two).
KA_FN constexpr bool kh_depth_supported(int depth) { return depth == 64 || depth == 128; }
// Shared bytes of any of the three kernels (the forward pass's is the largest: q's tile and two
// stages of k's and v's), and 1 KiB to align the first tile to 1024.
KA_FN constexpr int kh_shared_bytes(int depth) {
  return 1024 + (kKhRows + 4 * kKhKeys) * depth * 2;
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows, KD] tile.
KA_FN int kh_swizzled(int rows, int row, int chunk) {
  return (chunk >> 3) * rows * 128 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

// A shared-memory operand's descriptor (128-byte swizzle): start address, LBO and SBO in bytes.
typedef unsigned long long KhDesc;
KA_FN KhDesc kh_desc(unsigned address, unsigned lbo, unsigned sbo) {
  return static_cast<KhDesc>((address & 0x3FFFF) >> 4) |
         (static_cast<KhDesc>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<KhDesc>((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

// ---- the primitives ----
#ifdef __CUDACC_RTC__
KA_FN unsigned kh_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// Orders this thread's shared-memory writes (cp.async's, which are the generic proxy's) before
// the tensor cores' reads of them through a descriptor (the async proxy).
KA_FN void kh_fence_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Before a chain of wgmma: their accumulator and A registers as the thread last wrote them.
KA_FN void kh_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
KA_FN void kh_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Every committed group of products but the newest kPending has completed.
template <int kPending>
KA_FN void kh_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
KA_FN void kh_wait_all() { kh_wait<0>(); }
// An accumulator register "rewritten" here, so that the compiler neither reads it before the
// wait that completes the products nor moves a write of it past the fence before them.
KA_FN void kh_pin(float& x) { asm volatile("" : "+f"(x)::"memory"); }

#define KH_R32                                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define KH_R64                                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"
#define KH_D4(n) "+f"(d[0][n][0]), "+f"(d[0][n][1]), "+f"(d[0][n][2]), "+f"(d[0][n][3])
#define KH_D32 KH_D4(0), KH_D4(1), KH_D4(2), KH_D4(3), KH_D4(4), KH_D4(5), KH_D4(6), KH_D4(7)
#define KH_D64 \
  KH_D32, KH_D4(8), KH_D4(9), KH_D4(10), KH_D4(11), KH_D4(12), KH_D4(13), KH_D4(14), KH_D4(15)
// d (64 x N, f32) = or += A Bᵀ for 64 x 16 A and N x 16 B in shared memory, both K-major
// (TRANS "0, 0") or both MN-major, read transposed (TRANS "1, 1": d = or += A B for A 64 x 16
// and B 16 x N).
#define KH_SS(T, N, R, D, A, B, ACC, TRANS)                                                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" ACC                                       \
               ", 0;\n"                                                                       \
               "wgmma.mma_async.sync.aligned.m64n" N "k16.f32." T "." T " " R ", %" A ", %" B \
               ", p, 1, 1, " TRANS ";\n}\n"                                                   \
               : D                                                                            \
               : "l"(a), "l"(b), "r"(accumulate))
// d (64 x N, f32) += A B for A (64 x 16) in registers and B (16 x N) MN-major in shared memory
// (read transposed).
#define KH_RS(T, N, R, D, A0, A1, A2, A3, B, ACC)                                                \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" ACC                                          \
               ", 0;\n"                                                                          \
               "wgmma.mma_async.sync.aligned.m64n" N "k16.f32." T "." T " " R ", {%" A0 ", %" A1 \
               ", %" A2 ", %" A3 "}, %" B ", p, 1, 1, 1;\n}\n"                                   \
               : D                                                                               \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1))
template <bool kBf16, int N>
KA_FN void kh_scores(float (&d)[1][N / 8][4], KhDesc a, KhDesc b, int accumulate) {
  if constexpr (N == 128 && kBf16) {
    KH_SS("bf16", "128", KH_R64, KH_D64, "64", "65", "66", "0, 0");
  } else if constexpr (N == 128) {
    KH_SS("f16", "128", KH_R64, KH_D64, "64", "65", "66", "0, 0");
  } else if constexpr (kBf16) {
    KH_SS("bf16", "64", KH_R32, KH_D32, "32", "33", "34", "0, 0");
  } else {
    KH_SS("f16", "64", KH_R32, KH_D32, "32", "33", "34", "0, 0");
  }
}
// d (64 x 64, f32) = or += A B for A (64 x 16) and B (16 x 64) MN-major in shared memory.
template <bool kBf16>
KA_FN void kh_product_mn(float (&d)[1][8][4], KhDesc a, KhDesc b, int accumulate) {
  if constexpr (kBf16) {
    KH_SS("bf16", "64", KH_R32, KH_D32, "32", "33", "34", "1, 1");
  } else {
    KH_SS("f16", "64", KH_R32, KH_D32, "32", "33", "34", "1, 1");
  }
}
// *at += x, at[1] += y in global memory, as one vector reduction (no value returned).
KA_FN void kh_red_add2(float* at, float x, float y) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(at), "f"(x), "f"(y) : "memory");
}
template <bool kBf16, int N>
KA_FN void kh_accumulate(float (&d)[1][N / 8][4], const unsigned (&a)[4], KhDesc b) {
  if constexpr (N == 128 && kBf16) {
    KH_RS("bf16", "128", KH_R64, KH_D64, "64", "65", "66", "67", "68", "69");
  } else if constexpr (N == 128) {
    KH_RS("f16", "128", KH_R64, KH_D64, "64", "65", "66", "67", "68", "69");
  } else if constexpr (kBf16) {
    KH_RS("bf16", "64", KH_R32, KH_D32, "32", "33", "34", "35", "36", "37");
  } else {
    KH_RS("f16", "64", KH_R32, KH_D32, "32", "33", "34", "35", "36", "37");
  }
}
#else
unsigned kh_address(const void* p);
void kh_fence_shared();
void kh_fence();
void kh_commit();
void kh_wait_host(int pending);
template <int kPending>
inline void kh_wait() {
  kh_wait_host(kPending);
}
inline void kh_wait_all() { kh_wait<0>(); }
inline void kh_pin(float&) {}
void kh_host_scores(float* d, int n, KhDesc a, KhDesc b, bool accumulate, bool bf16);
void kh_host_accumulate(float* d, int n, const unsigned* a, KhDesc b, bool bf16);
void kh_host_product_mn(float* d, KhDesc a, KhDesc b, bool accumulate, bool bf16);
void kh_red_add2(float* at, float x, float y);
template <bool kBf16>
inline void kh_product_mn(float (&d)[1][8][4], KhDesc a, KhDesc b, int accumulate) {
  kh_host_product_mn(&d[0][0][0], a, b, accumulate != 0, kBf16);
}
template <bool kBf16, int N>
inline void kh_scores(float (&d)[1][N / 8][4], KhDesc a, KhDesc b, int accumulate) {
  kh_host_scores(&d[0][0][0], N, a, b, accumulate != 0, kBf16);
}
template <bool kBf16, int N>
inline void kh_accumulate(float (&d)[1][N / 8][4], const unsigned (&a)[4], KhDesc b) {
  kh_host_accumulate(&d[0][0][0], N, a, b, kBf16);
}
#endif

// The block's shared memory from its first 1024-byte boundary (the swizzle reads address bits
// 4-9, so tiles start on one): a pointer, and its shared address for descriptors.
struct KhShared {
  unsigned char* at;
  unsigned address;
};
KA_FN KhShared kh_aligned(unsigned char* smem) {
  const unsigned raw = kh_address(smem);
  const unsigned pad = (1024u - (raw & 1023u)) & 1023u;
  return {smem + pad, raw + pad};
}

// Rows [row0, row0 + kTileRows) of a [rows, KD] operand (row stride `stride` elements) into a
// swizzled shared tile; rows past `rows` are zeros.
template <int KD, int kTileRows>
KA_FN void kh_load_tile(unsigned char* dst, const unsigned short* src, long long stride,
                        long long row0, long long rows) {
  constexpr int kChunks = KD / 8;  // 16-byte pieces of a row
  for (int c = static_cast<int>(ka_thread()); c < kTileRows * kChunks; c += kKhThreads) {
    const int r = c / kChunks, chunk = c % kChunks;
    const bool valid = row0 + r < rows;
    ka_copy16(reinterpret_cast<unsigned short*>(dst + kh_swizzled(kTileRows, r, chunk)),
              valid ? src + (row0 + r) * stride + chunk * 8 : src, valid);
  }
}

// Every register of an accumulator pinned (kh_pin) between a chain of products and its users.
template <int N>
KA_FN void kh_pin_all(float (&d)[1][N][4]) {
  KA_UNROLL for (int n = 0; n < N; ++n) {
    KA_UNROLL for (int c = 0; c < 4; ++c) kh_pin(d[0][n][c]);
  }
}

// A tile of weights (the accumulator layout, kN columns) rounded to the input type as the A
// operands of the next products, 16 columns each.
template <bool kBf16, int kN>
KA_FN void kh_pack_weights(unsigned (&a)[kN / 16][4], const float (&w)[1][kN / 8][4]) {
  KA_UNROLL for (int kk = 0; kk < kN / 16; ++kk) {
    a[kk][0] = ka_pack<kBf16>(w[0][2 * kk][0], w[0][2 * kk][1]);
    a[kk][1] = ka_pack<kBf16>(w[0][2 * kk][2], w[0][2 * kk][3]);
    a[kk][2] = ka_pack<kBf16>(w[0][2 * kk + 1][0], w[0][2 * kk + 1][1]);
    a[kk][3] = ka_pack<kBf16>(w[0][2 * kk + 1][2], w[0][2 * kk + 1][3]);
  }
}

// The score chain of a tile: s = q kᵀ for the warpgroup's 64 rows (q_rows: their shared address
// in the q tile) and the 128 keys of the k tile at `keys`, issued (not waited for).
template <int KD, bool kBf16>
KA_FN void kh_issue_scores(float (&s)[1][kKhKeys / 8][4], unsigned q_rows, unsigned keys) {
  KA_UNROLL for (int kk = 0; kk < KD / 16; ++kk) {
    const unsigned panel = (kk >> 2), within = (kk & 3) * 32;
    kh_scores<kBf16, kKhKeys>(s, kh_desc(q_rows + panel * kKhRows * 128 + within, 16, 1024),
                              kh_desc(keys + panel * kKhKeys * 128 + within, 16, 1024), kk);
  }
}
// The value chain of a tile: o += P v for the weights a (kh_pack_weights) and the v tile at
// `values`, issued (not waited for).
template <int KD, bool kBf16>
KA_FN void kh_issue_values(float (&o)[1][KD / 8][4], const unsigned (&a)[kKhKeys / 16][4],
                           unsigned values) {
  KA_UNROLL for (int kk = 0; kk < kKhKeys / 16; ++kk) {
    kh_accumulate<kBf16, KD>(o, a[kk], kh_desc(values + kk * 16 * 128, kKhKeys * 128, 1024));
  }
}

// Where a thread of a forward block stands (kh_attention, kh_attention_pipelined): the block's
// shared tiles (q's, then two stages of k's and two of v's, from a 1024-byte boundary) and their
// shared addresses, its head, its query rows [q0, q0 + 128) (the last query blocks first), this
// warp's 16 rows and the address of this warpgroup's 64 in q's tile, and the key tiles to walk
// (under the causal cut none after the block's last query).
template <int KD>
struct KhForwardBlock {
  static constexpr int kQBytes = kKhRows * KD * 2, kTileBytes = kKhKeys * KD * 2;
  KaHead head;
  unsigned char *q_tile, *k_tiles, *v_tiles;
  unsigned q_at, k_at, v_at, q_rows;
  long long q0, first_row;
  int key_tiles;
  KA_FN KhForwardBlock(const KaParams& p, unsigned char* smem) {
    const KhShared base = kh_aligned(smem);
    q_tile = base.at;
    k_tiles = q_tile + kQBytes;
    v_tiles = k_tiles + 2 * kTileBytes;
    q_at = base.address;
    k_at = q_at + kQBytes;
    v_at = k_at + 2 * kTileBytes;
    head = ka_head<KD>(p);
    const int group = head.warp >> 2;
    q_rows = q_at + group * 64 * 128;
    q0 = (p.query_blocks - 1 - head.tile) * kKhRows;
    first_row = q0 + group * 64 + (head.warp & 3) * 16;
    long long key_end = p.keys;
    if (p.causal && q0 + kKhRows < key_end) key_end = q0 + kKhRows;
    key_tiles = static_cast<int>((key_end + kKhKeys - 1) / kKhKeys);
  }
};

// One block of the forward pass (kStats: of the backward pass's statistics, with no values
// read), as ka_attention but on the Hopper layout above: query rows [q0, q0 + 128) of (batch,
// head) bh, the last query blocks first. smem: kh_shared_bytes(KD), 16-byte aligned.
template <int KD, bool kBf16, bool kMask, bool kBias, bool kStats, bool kDropout = false>
KA_FN void kh_attention(const KaParams& p, unsigned char* smem) {
  const KhForwardBlock<KD> f(p, smem);
  const KaHead& head = f.head;
  const int lane = head.lane;
  const long long bh = head.bh, b = head.b, h = head.h, q0 = f.q0, first_row = f.first_row;
  const int key_tiles = f.key_tiles;
  unsigned char *q_tile = f.q_tile, *k_tiles = f.k_tiles, *v_tiles = f.v_tiles;
  const unsigned k_at = f.k_at, v_at = f.v_at, q_rows = f.q_rows;
  constexpr int kTileBytes = KhForwardBlock<KD>::kTileBytes;

  // One group of copies committed per step, as in ka_attention.
  kh_load_tile<KD, kKhRows>(q_tile, head.q, p.q_strides[2], q0, p.queries);
  for (int j = 0; j < 2; ++j) {
    if (j < key_tiles) {
      kh_load_tile<KD, kKhKeys>(k_tiles + j * kTileBytes, head.k, p.k_strides[2], j * kKhKeys,
                                p.keys);
      if (!kStats) {
        kh_load_tile<KD, kKhKeys>(v_tiles + j * kTileBytes, head.v, p.v_strides[2], j * kKhKeys,
                                  p.keys);
      }
    }
    ka_commit();
  }

  KaWarpState<KD, 1> w;
  ka_start(w);
  unsigned long long dropout_key = 0;
  if constexpr (kDropout) dropout_key = ka_dropout_key(p);
  for (int j = 0; j < key_tiles; ++j) {
    ka_wait<1>();       // this thread's copies of tile j are in
    kh_fence_shared();  // visible to the tensor cores' reads
    ka_sync();          // and every thread's
    const long long k0 = static_cast<long long>(j) * kKhKeys;
    const unsigned stage = (j & 1) * kTileBytes;
    // No warpgroup skips a tile under the causal cut: the last tile starts at q0, before every
    // warpgroup's last row (a warp whose rows all precede it has its scores excluded).
    {
      float s[1][kKhKeys / 8][4];
      kh_fence();
      kh_issue_scores<KD, kBf16>(s, q_rows, k_at + stage);
      kh_commit();
      kh_wait_all();
      kh_pin_all(s);
      const bool checked =
          kMask || kBias || k0 + kKhKeys > p.keys || (p.causal && k0 + kKhKeys - 1 > first_row);
      const float factor = ka_prepare_scores<kBf16, kMask, kBias, 1, false, kKhKeys>(
          s, p, checked, b, h, first_row, k0, lane);
      ka_softmax_step<KD, !kStats, 1, kKhKeys>(s, w, factor);
      if (!kStats) {
        if constexpr (kDropout) {
          // The sums keep every weight; the values take the kept ones (ka_attention's).
          ka_drop<1, kKhKeys>(
              s, p, ka_dropout_kept<1, false, kKhKeys>(p, dropout_key, bh, first_row, k0, lane));
        }
        unsigned a[kKhKeys / 16][4];
        kh_pack_weights<kBf16, kKhKeys>(a, s);
        kh_pin_all(w.o);
        kh_fence();
        kh_issue_values<KD, kBf16>(w.o, a, v_at + stage);
        kh_commit();
        kh_wait_all();
        kh_pin_all(w.o);
      }
    }
    ka_sync();  // every warpgroup is done with stage j & 1
    if (j + 2 < key_tiles) {
      kh_load_tile<KD, kKhKeys>(k_tiles + stage, head.k, p.k_strides[2], k0 + 2 * kKhKeys, p.keys);
      if (!kStats) {
        kh_load_tile<KD, kKhKeys>(v_tiles + stage, head.v, p.v_strides[2], k0 + 2 * kKhKeys,
                                  p.keys);
      }
    }
    ka_commit();
  }
  if (kStats) {
    ka_store_stats<KD, kBf16, 1>(w, p, bh, first_row, lane);
  } else {
    ka_store<KD, kBf16, 1>(w, p, bh, first_row, lane);
  }
}

// The forward pass as kh_attention with each warpgroup's products overlapped with its softmax:
// while tile j's weights meet v, tile j + 1's scores are made and, once they are, their softmax
// step taken; the values are rescaled after tile j's sum completes. K runs a tile ahead of v in
// the two stages of each: step j reads k's tile j + 1 and v's tile j, and then k's tile j + 3 and
// v's tile j + 2 are copied into the stages they free (one group of copies a step, waited for two
// steps later). KILN_ATTENTION_WGMMA=2 selects it (cuda_attention.cpp) until timed against
// kh_attention.
template <int KD, bool kBf16, bool kMask, bool kBias>
KA_FN void kh_attention_pipelined(const KaParams& p, unsigned char* smem) {
  const KhForwardBlock<KD> f(p, smem);
  const KaHead& head = f.head;
  const int lane = head.lane;
  const long long bh = head.bh, b = head.b, h = head.h, q0 = f.q0, first_row = f.first_row;
  const int key_tiles = f.key_tiles;
  unsigned char *q_tile = f.q_tile, *k_tiles = f.k_tiles, *v_tiles = f.v_tiles;
  const unsigned k_at = f.k_at, v_at = f.v_at, q_rows = f.q_rows;
  constexpr int kTileBytes = KhForwardBlock<KD>::kTileBytes;
  // Tile t's k goes to k stage t & 1, its v to v stage t & 1.
  auto load_keys = [&](int t) {
    if (t < key_tiles) {
      kh_load_tile<KD, kKhKeys>(k_tiles + (t & 1) * kTileBytes, head.k, p.k_strides[2],
                                static_cast<long long>(t) * kKhKeys, p.keys);
    }
  };
  auto load_values = [&](int t) {
    if (t < key_tiles) {
      kh_load_tile<KD, kKhKeys>(v_tiles + (t & 1) * kTileBytes, head.v, p.v_strides[2],
                                static_cast<long long>(t) * kKhKeys, p.keys);
    }
  };
  // The weights of tile t's scores in s (the running maxima and sums moved to it).
  float rescale[1][2];
  KaWarpState<KD, 1> w;
  auto softmax = [&](float(&s)[1][kKhKeys / 8][4], int t) {
    const long long k0 = static_cast<long long>(t) * kKhKeys;
    const bool checked =
        kMask || kBias || k0 + kKhKeys > p.keys || (p.causal && k0 + kKhKeys - 1 > first_row);
    const float factor = ka_prepare_scores<kBf16, kMask, kBias, 1, false, kKhKeys>(
        s, p, checked, b, h, first_row, k0, lane);
    return ka_softmax_weights<1, kKhKeys>(s, w.m, w.l, factor, rescale);
  };

  ka_start(w);

  // Tile 0's scores and weights first.
  kh_load_tile<KD, kKhRows>(q_tile, head.q, p.q_strides[2], q0, p.queries);
  load_keys(0);
  load_keys(1);
  load_values(0);
  ka_commit();
  ka_wait<0>();
  kh_fence_shared();
  ka_sync();
  float s[1][kKhKeys / 8][4];
  kh_fence();
  kh_issue_scores<KD, kBf16>(s, q_rows, k_at);
  kh_commit();
  kh_wait_all();
  kh_pin_all(s);
  softmax(s, 0);
  unsigned a[kKhKeys / 16][4];
  kh_pack_weights<kBf16, kKhKeys>(a, s);
  ka_sync();  // every warpgroup is done with k's stage 0
  load_keys(2);
  load_values(1);
  ka_commit();

  // Every step but the last makes the next tile's scores beside this tile's sum (no branch on
  // it inside: the compiler would then keep every product apart).
  for (int j = 0; j + 1 < key_tiles; ++j) {
    ka_wait<1>();  // k's tile j + 1 and v's tile j are in (copied two steps ago)
    kh_fence_shared();
    ka_sync();
    kh_pin_all(w.o);
    kh_fence();
    kh_issue_scores<KD, kBf16>(s, q_rows, k_at + ((j + 1) & 1) * kTileBytes);
    kh_commit();
    kh_issue_values<KD, kBf16>(w.o, a, v_at + (j & 1) * kTileBytes);
    kh_commit();
    kh_wait<1>();  // the scores; the values' sum may still run
    kh_pin_all(s);
    const bool changed = softmax(s, j + 1);
    kh_wait_all();
    kh_pin_all(w.o);
    ka_rescale<KD, 1>(w.o, rescale, changed);
    kh_pack_weights<kBf16, kKhKeys>(a, s);
    ka_sync();  // every warpgroup is done with k's stage (j + 1) & 1 and v's stage j & 1
    load_keys(j + 3);
    load_values(j + 2);
    ka_commit();
  }
  // The last tile's sum.
  ka_wait<1>();
  kh_fence_shared();
  ka_sync();
  kh_pin_all(w.o);
  kh_fence();
  kh_issue_values<KD, kBf16>(w.o, a, v_at + ((key_tiles - 1) & 1) * kTileBytes);
  kh_commit();
  kh_wait_all();
  kh_pin_all(w.o);
  ka_store<KD, kBf16, 1>(w, p, bh, first_row, lane);
}

// The backward pass's tiles: 64 keys a tile for dq's blocks of 128 queries, 64 queries a tile for
// dk's and dv's blocks of 128 keys (each block two warpgroups of 64 rows).
inline constexpr int kKhTile = 64;

// The backward pass's two score-shaped products of a tile: s = A Bᵀ and dp = A' B'ᵀ, A and A'
// the warpgroup's 64 rows of 128-row block tiles (a_rows, a2_rows: shared addresses of those
// rows), B and B' 64-row tiles (at b, b2), all [rows, KD] swizzled, K-major.
template <int KD, bool kBf16>
KA_FN void kh_tile_products(float (&s)[1][kKhTile / 8][4], float (&dp)[1][kKhTile / 8][4],
                            unsigned a_rows, unsigned b, unsigned a2_rows, unsigned b2) {
  kh_fence();
  KA_UNROLL for (int kk = 0; kk < KD / 16; ++kk) {
    const unsigned panel = kk >> 2, within = (kk & 3) * 32;
    const unsigned rows = panel * kKhRows * 128 + within, tile = panel * kKhTile * 128 + within;
    kh_scores<kBf16, kKhTile>(s, kh_desc(a_rows + rows, 16, 1024), kh_desc(b + tile, 16, 1024), kk);
    kh_scores<kBf16, kKhTile>(dp, kh_desc(a2_rows + rows, 16, 1024), kh_desc(b2 + tile, 16, 1024),
                              kk);
  }
  kh_commit();
  kh_wait_all();
  kh_pin_all(s);
  kh_pin_all(dp);
}

// dq of one block of the backward pass, as ka_attention_dq on warpgroup products: query rows
// [q0, q0 + 128) of (batch, head) bh, 64 a warpgroup, the last query blocks first. Per tile of 64
// keys: S = q kᵀ and dP = dO vᵀ (q, dO, k and v K-major in shared memory), dS = P (dP - D) in
// registers, dq += dS k (k read transposed). smem: q's and dO's 128 rows, two stages of k's and
// v's 64.
template <int KD, bool kBf16, bool kMask, bool kBias, bool kDropout = false>
KA_FN void kh_attention_dq(const KaParams& p, unsigned char* smem) {
  constexpr int kRowsBytes = kKhRows * KD * 2, kTileBytes = kKhTile * KD * 2;
  const KhShared base = kh_aligned(smem);
  unsigned char* q_tile = base.at;
  unsigned char* g_tile = q_tile + kRowsBytes;
  unsigned char* k_tiles = g_tile + kRowsBytes;       // two stages
  unsigned char* v_tiles = k_tiles + 2 * kTileBytes;  // two stages
  const unsigned q_at = base.address, g_at = q_at + kRowsBytes, k_at = g_at + kRowsBytes,
                 v_at = k_at + 2 * kTileBytes;
  const KaHead head = ka_head<KD>(p);
  const int warp = head.warp, lane = head.lane, group = warp >> 2;
  const long long bh = head.bh, b = head.b, h = head.h;
  const long long q0 = (p.query_blocks - 1 - head.tile) * kKhRows;
  const long long group_first = q0 + group * 64;
  const long long first_row = group_first + (warp & 3) * 16;  // this warp's 16 rows

  long long key_end = p.keys;
  if (p.causal && q0 + kKhRows < key_end) key_end = q0 + kKhRows;
  const int key_tiles = static_cast<int>((key_end + kKhTile - 1) / kKhTile);

  kh_load_tile<KD, kKhRows>(q_tile, head.q, p.q_strides[2], q0, p.queries);
  kh_load_tile<KD, kKhRows>(g_tile, head.grad, KD, q0, p.queries);
  for (int j = 0; j < 2; ++j) {
    if (j < key_tiles) {
      kh_load_tile<KD, kKhTile>(k_tiles + j * kTileBytes, head.k, p.k_strides[2], j * kKhTile,
                                p.keys);
      kh_load_tile<KD, kKhTile>(v_tiles + j * kTileBytes, head.v, p.v_strides[2], j * kKhTile,
                                p.keys);
    }
    ka_commit();
  }
  float L[2], D[2];
  ka_row_stats(p, bh, first_row, lane, L, D);

  float dq[1][KD / 8][4];
  ka_zero(dq);
  unsigned long long dropout_key = 0;
  if constexpr (kDropout) dropout_key = ka_dropout_key(p);
  const unsigned q_rows = q_at + group * 64 * 128, g_rows = g_at + group * 64 * 128;
  for (int j = 0; j < key_tiles; ++j) {
    ka_wait<1>();
    kh_fence_shared();
    ka_sync();
    const long long k0 = static_cast<long long>(j) * kKhTile;
    const unsigned stage = (j & 1) * kTileBytes;
    // Under the causal cut a warpgroup whose last row comes before the tile's first key skips it
    // (the products are the warpgroup's, so the test is too).
    if (!p.causal || k0 <= group_first + 63) {
      float s[1][kKhTile / 8][4], dp[1][kKhTile / 8][4];
      kh_tile_products<KD, kBf16>(s, dp, q_rows, k_at + stage, g_rows, v_at + stage);
      const bool checked =
          kMask || kBias || k0 + kKhTile > p.keys || (p.causal && k0 + kKhTile - 1 > first_row);
      const float factor = ka_prepare_scores<kBf16, kMask, kBias, 1, false, kKhTile>(
          s, p, checked, b, h, first_row, k0, lane);
      unsigned a[kKhTile / 16][4];
      if constexpr (kDropout) {  // dP times the mask's factor (ka_attention_dq's)
        ka_drop<1, kKhTile>(
            dp, p, ka_dropout_kept<1, false, kKhTile>(p, dropout_key, bh, first_row, k0, lane));
      }
      KA_UNROLL for (int n = 0; n < kKhTile / 8; ++n) {
        KA_UNROLL for (int c = 0; c < 4; ++c) {
          s[0][n][c] = ka_exp2(ka_fma(s[0][n][c], factor, -L[c >> 1])) * (dp[0][n][c] - D[c >> 1]);
        }
      }
      kh_pack_weights<kBf16, kKhTile>(a, s);
      kh_pin_all(dq);
      kh_fence();
      KA_UNROLL for (int kk = 0; kk < kKhTile / 16; ++kk) {
        kh_accumulate<kBf16, KD>(dq, a[kk],
                                 kh_desc(k_at + stage + kk * 16 * 128, kKhTile * 128, 1024));
      }
      kh_commit();
      kh_wait_all();
      kh_pin_all(dq);
    }
    ka_sync();
    if (j + 2 < key_tiles) {
      kh_load_tile<KD, kKhTile>(k_tiles + stage, head.k, p.k_strides[2], k0 + 2 * kKhTile, p.keys);
      kh_load_tile<KD, kKhTile>(v_tiles + stage, head.v, p.v_strides[2], k0 + 2 * kKhTile, p.keys);
    }
    ka_commit();
  }
  ka_store_f32<KD>(dq, p.scale, reinterpret_cast<float*>(p.dq) + bh * p.queries * KD, first_row,
                   p.queries, lane);
}

// The dk/dv kernel with dq (kQuery): each tile's dS, both warpgroups' 128 keys by the tile's 64
// queries, staged MN-major for dq's product (a key's 64 queries one swizzled 128-byte row).
inline constexpr int kKhScoresBytes = kKhRows * kKhTile * 2;
// Shared bytes of the kernel with kQuery: the dk/dv kernel's k, v, two stages of q, dO and their
// statistics, and the staged dS (more than kh_shared_bytes at head dim 64).
KA_FN constexpr int kh_dqkv_shared_bytes(int depth) {
  return 1024 + (2 * kKhRows + 4 * kKhTile) * depth * 2 + 2 * 2 * kKhTile * 4 + kKhScoresBytes;
}

// Byte offset of the pair of queries (col, col + 1) of staged key `row`.
KA_FN int kh_scores_slot(int row, int col) {
  return row * 128 + ((((col >> 3) ^ (row & 7))) << 4) + (col & 7) * 2;
}
// This warp's dSᵀ (its 16 keys from staged row key_row by the tile's 64 queries), packed as an A
// operand (kh_pack_weights: rows g and g + 8, columns 2t and 2t + 8 of each 16), into the stage.
KA_FN void kh_stage_scores(unsigned char* tile, const unsigned (&ds)[kKhTile / 16][4], int key_row,
                           int lane) {
  const int g = lane >> 2, t = lane & 3;
  KA_UNROLL for (int kk = 0; kk < kKhTile / 16; ++kk) {
    KA_UNROLL for (int c = 0; c < 4; ++c) {
      const int slot = kh_scores_slot(key_row + g + 8 * (c & 1), 16 * kk + 2 * t + 8 * (c >> 1));
      *reinterpret_cast<unsigned*>(tile + slot) = ds[kk][c];
    }
  }
}
// Zeros for this warp's 16 keys: its warpgroup skipped the tile (no query of it sees them).
KA_FN void kh_clear_scores(unsigned char* tile, int key_row, int lane) {
  const unsigned zeros[kKhTile / 16][4] = {};
  kh_stage_scores(tile, zeros, key_row, lane);
}

// The tile's share of dq from the staged dS and the block's k (both [128 keys, ...], reduced over
// the keys): columns [64 * panel, 64 * panel + 64) of the tile's 64 queries from q0, scaled and
// added to p.dq (f32, zeroed before the launch) by vector reductions.
template <int KD, bool kBf16>
KA_FN void kh_query_grads(const KaParams& p, long long bh, unsigned scores_at, unsigned k_at,
                          int panel, long long q0, int warp, int lane) {
  float acc[1][8][4];
  kh_fence();
  KA_UNROLL for (int kk = 0; kk < kKhRows / 16; ++kk) {
    const unsigned rows = kk * 16 * 128;
    kh_product_mn<kBf16>(acc, kh_desc(scores_at + rows, kKhRows * 128, 1024),
                         kh_desc(k_at + panel * kKhRows * 128 + rows, kKhRows * 128, 1024), kk);
  }
  kh_commit();
  kh_wait_all();
  kh_pin_all(acc);
  float* dq = reinterpret_cast<float*>(p.dq) + bh * p.queries * KD;
  const int g = lane >> 2, t = lane & 3;
  KA_UNROLL for (int r = 0; r < 2; ++r) {
    const long long row = q0 + 16 * (warp & 3) + g + 8 * r;
    if (row >= p.queries) continue;
    KA_UNROLL for (int n = 0; n < 8; ++n) {
      kh_red_add2(dq + row * KD + 64 * panel + 8 * n + 2 * t, acc[0][n][2 * r] * p.scale,
                  acc[0][n][2 * r + 1] * p.scale);
    }
  }
}

// dk and dv of one block of the backward pass, as ka_attention_dkv on warpgroup products: keys
// [key0, key0 + 128) of (batch, head) bh, 64 a warpgroup, the first key blocks first. Per tile of
// 64 queries (from the first that can see the block's keys): Sᵀ = k qᵀ, Pᵀ = 2^(Sᵀ - L),
// dv += Pᵀ dO, dPᵀ = v dOᵀ, dSᵀ = Pᵀ (dPᵀ - D), dk += dSᵀ q (dO and q read transposed for the
// sums). smem: k's and v's 128 rows, two stages of q's and dO's 64, two of their statistics.
// kQuery: dq too, the attention_query_backward kernel's work without its products of S and dP:
// each tile's dS staged in shared memory (kh_stage_scores), then dq's share of the tile
// (kh_query_grads; 64 of the head dim a warpgroup, the first warpgroup alone at head dim 64)
// added to p.dq by reductions; smem then kh_dqkv_shared_bytes.
template <int KD, bool kBf16, bool kMask, bool kBias, bool kQuery = false, bool kDropout = false>
KA_FN void kh_attention_dkv(const KaParams& p, unsigned char* smem) {
  constexpr int kRowsBytes = kKhRows * KD * 2, kTileBytes = kKhTile * KD * 2;
  const KhShared base = kh_aligned(smem);
  unsigned char* k_tile = base.at;
  unsigned char* v_tile = k_tile + kRowsBytes;
  unsigned char* q_tiles = v_tile + kRowsBytes;                                 // two stages
  unsigned char* g_tiles = q_tiles + 2 * kTileBytes;                            // two stages
  float* stat_tiles = reinterpret_cast<float*>(g_tiles + 2 * kTileBytes);       // two of 64 {L, D}
  unsigned char* scores_tile = g_tiles + 2 * kTileBytes + 2 * 2 * kKhTile * 4;  // kQuery's dS
  const unsigned k_at = base.address, v_at = k_at + kRowsBytes, q_at = v_at + kRowsBytes,
                 g_at = q_at + 2 * kTileBytes,
                 scores_at = g_at + 2 * kTileBytes + 2 * 2 * kKhTile * 4;
  const KaHead head = ka_head<KD>(p);
  const int warp = head.warp, lane = head.lane, group = warp >> 2;
  const long long bh = head.bh, b = head.b, h = head.h;
  const long long key0 = head.tile * kKhRows;
  const float* stats = reinterpret_cast<const float*>(p.stats) + 2 * bh * p.queries;
  const long long group_first = key0 + group * 64;
  const long long first_key = group_first + (warp & 3) * 16;  // this warp's 16 keys

  // Under the causal cut, queries before the block's first key see none of its keys.
  const long long tile0 = p.causal ? key0 / kKhTile : 0;
  const long long query_tiles = (p.queries + kKhTile - 1) / kKhTile;
  const int tiles = static_cast<int>(query_tiles > tile0 ? query_tiles - tile0 : 0);

  kh_load_tile<KD, kKhRows>(k_tile, head.k, p.k_strides[2], key0, p.keys);
  kh_load_tile<KD, kKhRows>(v_tile, head.v, p.v_strides[2], key0, p.keys);
  for (int j = 0; j < 2; ++j) {
    if (j < tiles) {
      const long long q0 = (tile0 + j) * kKhTile;
      kh_load_tile<KD, kKhTile>(q_tiles + j * kTileBytes, head.q, p.q_strides[2], q0, p.queries);
      kh_load_tile<KD, kKhTile>(g_tiles + j * kTileBytes, head.grad, KD, q0, p.queries);
      ka_load_stats<kKhTile, kKhThreads>(stat_tiles + j * 2 * kKhTile, stats, q0, p.queries);
    }
    ka_commit();
  }

  float dk[1][KD / 8][4], dv[1][KD / 8][4];
  ka_zero(dk);
  ka_zero(dv);
  const int t = lane & 3;
  unsigned long long dropout_key = 0;
  if constexpr (kDropout) dropout_key = ka_dropout_key(p);
  const unsigned k_rows = k_at + group * 64 * 128, v_rows = v_at + group * 64 * 128;
  for (int j = 0; j < tiles; ++j) {
    ka_wait<1>();
    kh_fence_shared();
    ka_sync();
    const long long q0 = (tile0 + j) * kKhTile;
    const unsigned stage = (j & 1) * kTileBytes;
    // Under the causal cut a warpgroup whose first key comes after the tile's last query skips it.
    if (!p.causal || group_first <= q0 + kKhTile - 1) {
      const float* tile_stats = stat_tiles + (j & 1) * 2 * kKhTile;
      float s[1][kKhTile / 8][4], dp[1][kKhTile / 8][4];
      kh_tile_products<KD, kBf16>(s, dp, k_rows, q_at + stage, v_rows, g_at + stage);
      const bool checked = kMask || kBias || q0 + kKhTile > p.queries || first_key + 16 > p.keys ||
                           (p.causal && first_key + 15 > q0);
      const float factor = ka_prepare_scores<kBf16, kMask, kBias, 1, true, kKhTile>(
          s, p, checked, b, h, first_key, q0, lane);
      KA_UNROLL for (int n = 0; n < kKhTile / 8; ++n) {
        KA_UNROLL for (int c = 0; c < 4; ++c) {
          s[0][n][c] =
              ka_exp2(ka_fma(s[0][n][c], factor, -tile_stats[2 * (n * 8 + 2 * t + (c & 1))]));
        }
      }
      unsigned a[kKhTile / 16][4];
      if constexpr (kDropout) {
        // dv takes the kept weights, dS the kept dP (ka_attention_dkv's).
        const unsigned long long kept =
            ka_dropout_kept<1, true, kKhTile>(p, dropout_key, bh, first_key, q0, lane);
        float dropped[1][kKhTile / 8][4];
        KA_UNROLL for (int n = 0; n < kKhTile / 8; ++n) {
          KA_UNROLL for (int c = 0; c < 4; ++c) dropped[0][n][c] = s[0][n][c];
        }
        ka_drop<1, kKhTile>(dropped, p, kept);
        kh_pack_weights<kBf16, kKhTile>(a, dropped);
        ka_drop<1, kKhTile>(dp, p, kept);
      } else {
        kh_pack_weights<kBf16, kKhTile>(a, s);
      }
      KA_UNROLL for (int n = 0; n < kKhTile / 8; ++n) {
        KA_UNROLL for (int c = 0; c < 4; ++c) {
          s[0][n][c] *= dp[0][n][c] - tile_stats[2 * (n * 8 + 2 * t + (c & 1)) + 1];
        }
      }
      unsigned ds[kKhTile / 16][4];
      kh_pack_weights<kBf16, kKhTile>(ds, s);
      kh_pin_all(dv);
      kh_pin_all(dk);
      kh_fence();
      KA_UNROLL for (int kk = 0; kk < kKhTile / 16; ++kk) {
        kh_accumulate<kBf16, KD>(dv, a[kk],
                                 kh_desc(g_at + stage + kk * 16 * 128, kKhTile * 128, 1024));
        kh_accumulate<kBf16, KD>(dk, ds[kk],
                                 kh_desc(q_at + stage + kk * 16 * 128, kKhTile * 128, 1024));
      }
      kh_commit();
      kh_wait_all();
      kh_pin_all(dv);
      kh_pin_all(dk);
      if (kQuery) kh_stage_scores(scores_tile, ds, group * 64 + (warp & 3) * 16, lane);
    } else if (kQuery) {
      kh_clear_scores(scores_tile, group * 64 + (warp & 3) * 16, lane);
    }
    if (kQuery) {
      kh_fence_shared();  // the staged dS (generic proxy writes) before the products read it
      ka_sync();
      if (group < KD / 64) {
        kh_query_grads<KD, kBf16>(p, bh, scores_at, k_at, group, q0, warp, lane);
      }
    }
    ka_sync();
    if (j + 2 < tiles) {
      const long long next = q0 + 2 * kKhTile;
      kh_load_tile<KD, kKhTile>(q_tiles + stage, head.q, p.q_strides[2], next, p.queries);
      kh_load_tile<KD, kKhTile>(g_tiles + stage, head.grad, KD, next, p.queries);
      ka_load_stats<kKhTile, kKhThreads>(stat_tiles + (j & 1) * 2 * kKhTile, stats, next,
                                         p.queries);
    }
    ka_commit();
  }
  ka_store_key_grads<KD>(dk, dv, p, bh, first_key, lane);
}

}  // namespace kiln::cuda::attention_kernels

#endif  // KILN_CUDA_ATTENTION_HOPPER_H
