// The bodies of the quantized kernels (quant.h), one text for two compilers like quant_blocks.h
// (which it follows in every generated module): NVRTC compiles it, each kernel an instance of a
// template here (quant_source.cpp writes the extern "C" entry), and the host tests run the same
// templates on an emulated grid, a fiber per CUDA thread (tests/gpu/kernel_emulator.h), so
// the staging, the splits and every index are checked without a GPU. Under NVRTC the primitives
// below are CUDA's (threadIdx, __syncthreads, mma.sync, cp.async); on the host they are declared
// here and defined by the emulator.
#ifndef KILN_CUDA_QUANT_KERNELS_H
#define KILN_CUDA_QUANT_KERNELS_H

#ifndef __CUDACC_RTC__
#include "backends/cuda/tensor_core.h"
#endif

namespace kiln::cuda::quant_blocks {

// ---- the primitives ----
#ifdef __CUDACC_RTC__
KQ_FN unsigned kq_thread() { return threadIdx.x; }
KQ_FN unsigned kq_block() { return blockIdx.x; }
KQ_FN unsigned kq_block_threads() { return blockDim.x; }
KQ_FN unsigned kq_grid_blocks() { return gridDim.x; }
KQ_FN void kq_sync() { __syncthreads(); }
// c += A b on the tensor cores in integers: A's bytes (the codes; signed with kSigned, else
// unsigned), b's signed bytes (x rounded to int8), 32-bit sums; m16n8k32 (a[0..3], b0, b1) or,
// with kK16, m16n8k16 (a[0..1], b0). Lane 4g + t holds A's row g (and g + 8) at k = 4t .. 4t + 3
// (and 16 + 4t ..), B's column g at the same k, and C's rows g, g + 8 at columns 2t, 2t + 1.
#define KQ_MMA_I8_K32(A)                                                           \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32." A                          \
               ".s8.s32 "                                                          \
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n" \
               : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])                    \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
#define KQ_MMA_I8_K16(A)                                               \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.s32." A              \
               ".s8.s32 "                                              \
               "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n" \
               : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])        \
               : "r"(a[0]), "r"(a[1]), "r"(b0))
template <bool kK16, bool kSigned>
KQ_FN void kq_mma_i8(int* c, const unsigned* a, unsigned b0, unsigned b1) {
  if constexpr (kK16 && kSigned) {
    KQ_MMA_I8_K16("s8");
  } else if constexpr (kK16) {
    KQ_MMA_I8_K16("u8");
  } else if constexpr (kSigned) {
    KQ_MMA_I8_K32("s8");
  } else {
    KQ_MMA_I8_K32("u8");
  }
}
#undef KQ_MMA_I8_K16
#undef KQ_MMA_I8_K32
// 16 bytes from global to shared memory, asynchronously (cp.async, through L2 only).
KQ_FN void kq_copy16(unsigned char* dst, unsigned long long src) {
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(src));
}
KQ_FN void kq_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most kPending of this thread's copy groups are in flight.
template <int kPending>
KQ_FN void kq_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
// Eight floats to 32-byte aligned memory: two 16-byte stores.
KQ_FN void kq_store8(float* out, const float* v) {
  reinterpret_cast<float4*>(out)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(out)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
// Two words of x (four 16-bit values, or eight int8 codes) through the read-only path.
KQ_FN void kq_load8(const void* at, unsigned& lo, unsigned& hi) {
  const uint2 v = __ldg(reinterpret_cast<const uint2*>(at));
  lo = v.x;
  hi = v.y;
}
// Eight bytes of shared memory (8-byte aligned) as two words.
KQ_FN void kq_shared8(const unsigned char* at, unsigned& lo, unsigned& hi) {
  const uint2 v = *reinterpret_cast<const uint2*>(at);
  lo = v.x;
  hi = v.y;
}
// 16 zero bytes to 16-byte aligned shared memory.
KQ_FN void kq_zero16(unsigned char* dst) {
  *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
}
// The split-k handshake: a fence orders this thread's stores before its later ones for every
// block of the grid; a ticket is the counter's value before adding one; another block's partial
// sums are read through L2 (never a stale L1 line).
KQ_FN void kq_fence() { __threadfence(); }
KQ_FN unsigned kq_ticket(unsigned* counter) { return atomicAdd(counter, 1u); }
KQ_FN float kq_load_l2(const float* at) { return __ldcg(at); }
KQ_FN void kq_warp_sync() { __syncwarp(); }
// Programmatic dependent launch (dispatcher.h's LaunchOrder): the prelude's k_grid_dependency.
KQ_FN void kq_grid_dependency() { k_grid_dependency(); }
KQ_FN float kq_round(float v) { return roundf(v); }  // halves away from zero, as std::round
KQ_FN float kq_nan() { return __int_as_float(0x7fc00000); }
// v of lane (this lane ^ mask); every lane of the warp takes part.
KQ_FN unsigned kq_shfl_xor(unsigned v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
// c + the four products of a's unsigned bytes with b's signed bytes.
KQ_FN int kq_dp4a(unsigned a, unsigned b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
#else
unsigned kq_thread();
unsigned kq_block();
unsigned kq_block_threads();
unsigned kq_grid_blocks();
void kq_sync();
inline void kq_copy16(unsigned char* dst, unsigned long long src) {
  std::memcpy(dst, reinterpret_cast<const void*>(src), 16);
}
inline void kq_commit() {}
template <int kPending>
inline void kq_wait() {}
inline void kq_store8(float* out, const float* v) { std::memcpy(out, v, 32); }
inline void kq_load8(const void* at, unsigned& lo, unsigned& hi) {
  std::memcpy(&lo, at, 4);
  std::memcpy(&hi, static_cast<const unsigned char*>(at) + 4, 4);
}
inline void kq_shared8(const unsigned char* at, unsigned& lo, unsigned& hi) {
  kq_load8(at, lo, hi);
}
inline void kq_zero16(unsigned char* dst) { std::memset(dst, 0, 16); }
void kq_host_mma_i8(int* c, const unsigned* a, unsigned b0, unsigned b1, bool k16, bool is_signed);
template <bool kK16, bool kSigned>
inline void kq_mma_i8(int* c, const unsigned* a, unsigned b0, unsigned b1) {
  kq_host_mma_i8(c, a, b0, b1, kK16, kSigned);
}
void kq_fence();
unsigned kq_ticket(unsigned* counter);
inline float kq_load_l2(const float* at) { return *at; }
void kq_warp_sync();
inline void kq_grid_dependency() {}  // the emulated grid runs one launch at a time
unsigned kq_shfl_xor(unsigned v, int mask);
inline float kq_round(float v) { return std::round(v); }
inline float kq_nan() { return std::numeric_limits<float>::quiet_NaN(); }
inline int kq_dp4a(unsigned a, unsigned b, int c) {
  for (int e = 0; e < 4; ++e) {
    c += static_cast<int>((a >> (8 * e)) & 0xFF) * static_cast<signed char>((b >> (8 * e)) & 0xFF);
  }
  return c;
}
#endif

// The sum of v over the warp's 32 lanes (a butterfly), in every lane.
KQ_FN float kq_warp_sum(float v) {
  KQ_UNROLL for (int o = 16; o > 0; o >>= 1) v += kq_bits_f32(kq_shfl_xor(kq_f32_bits(v), o));
  return v;
}

// ---- kiln_quant_decode ----
// Mirrors QuantDecodeParams (quant.h).
struct KqDecodeParams {
  unsigned long long blocks, out, index, error_word;
  long long rows, width, row_bytes, table_rows, int8_block;
  unsigned error_token, pad;
};

// The source row of output row r: itself, or the index's entry (checked: one out of range
// reports the op's error token and decodes as zeros).
template <bool kIndexed>
KQ_FN long long kq_source_row(const KqDecodeParams& p, long long r, bool& ok) {
  if constexpr (kIndexed) {
    const long long row = reinterpret_cast<const long long*>(p.index)[r];
    ok = row >= 0 && row < p.table_rows;
    if (!ok) *reinterpret_cast<volatile unsigned*>(p.error_word) = p.error_token;
    return ok ? row : 0;
  } else {
    ok = true;
    return r;
  }
}

// Eight values a thread (a GGUF kind: every row a whole number of blocks, a multiple of 8).
template <class Kind, bool kIndexed>
KQ_FN void kq_decode(const KqDecodeParams& p) {
  const auto* W = reinterpret_cast<const unsigned char*>(p.blocks);
  float* out = reinterpret_cast<float*>(p.out);
  constexpr int kGroups = Kind::kValues / 8;
  const long long groups = p.width / 8, total = p.rows * groups;
  const long long step = static_cast<long long>(kq_grid_blocks()) * kq_block_threads();
  for (long long i = static_cast<long long>(kq_block()) * kq_block_threads() + kq_thread();
       i < total; i += step) {
    const long long r = i / groups, j = i % groups;
    bool ok;
    const long long row = kq_source_row<kIndexed>(p, r, ok);
    float v[8];
    Kind::decode8(W + row * p.row_bytes + j / kGroups * Kind::kBytes, static_cast<int>(j % kGroups),
                  v);
    if (!ok) {
      KQ_UNROLL for (int e = 0; e < 8; ++e) v[e] = 0.0f;
    }
    kq_store8(out + r * p.width + 8 * j, v);
  }
}

// A value a thread: kiln's int8 blocks may be of any size.
template <bool kIndexed>
KQ_FN void kq_decode_int8(const KqDecodeParams& p) {
  const auto* W = reinterpret_cast<const unsigned char*>(p.blocks);
  float* out = reinterpret_cast<float*>(p.out);
  const long long total = p.rows * p.width;
  const long long step = static_cast<long long>(kq_grid_blocks()) * kq_block_threads();
  for (long long i = static_cast<long long>(kq_block()) * kq_block_threads() + kq_thread();
       i < total; i += step) {
    const long long r = i / p.width, c = i % p.width;
    bool ok;
    const long long row = kq_source_row<kIndexed>(p, r, ok);
    const unsigned char* block = W + row * p.row_bytes + c / p.int8_block * (p.int8_block + 4);
    out[i] = ok ? KqInt8::decode(block, c % p.int8_block) : 0.0f;
  }
}

// ---- kiln_quant_product ----
// Mirrors QuantProductParams (quant.h).
struct KqProductParams {
  unsigned long long weight, x, partial, out, bias, counters;
  long long n, k, rows, row_bytes, plane, int8_block;
  int row_tiles, column_groups, splits, tiles_per_split;
  int warp_rows, unused;  // kiln_quant_matvec: rows of W a warp
  // x rounded to int8 blocks (kTerms 0): p.x the codes, this their blocks' scales
  // (kiln_quant_round's KqRoundParams).
  unsigned long long x_scales;
};

constexpr int kKqRows = 64;   // weight rows per block of threads: 4 warps of 16
constexpr int kKqTile = 256;  // values of a row per stage
// x in one 16-bit part (kTerms 1) or rounded to int8 (kTerms 0) is staged beside W: a row of x's
// tile in kq_x_stride bytes (its 256 values and 32 bytes more, so the 8 rows a B fragment reads at
// once start in 4 different banks), and for int8 its 8 blocks' scales in kKqXScaleStride (128
// bytes and 16, every row in its own bank). f32's three parts are read from global memory.
template <int kTerms>
constexpr int kq_x_stride() {
  return kKqTile * (kTerms == 0 ? 1 : 2) + 32;
}
constexpr int kKqXScaleStride = kKqTile / 32 * 16 + 16;
// Bytes of one stage of kiln_quant_product: 64 rows of W, then x's tile where it is staged.
template <int kTerms, int kNt, int kRowStride>
constexpr int kq_stage_bytes() {
  return kKqRows * kRowStride + (kTerms == 0 ? kNt * 8 * (kq_x_stride<0>() + kKqXScaleStride)
                                             : (kTerms == 1 ? kNt * 8 * kq_x_stride<1>() : 0));
}

// Values of the tile from value k0 of a row: 256, or what is left of k.
KQ_FN long long kq_tile_values(const KqProductParams& p, long long k0) {
  return p.k - k0 < kKqTile ? p.k - k0 : kKqTile;
}

// How a kind's rows are cut into tiles of 256 values: kInt8 0 for the GGUF kinds (whole blocks
// of Kind), 1 for int8 blocks that divide the tile, 2 for tiles inside one int8 block.
template <class Kind, int kInt8>
struct KqTiles {
  // Where the bytes of a row's values [k0, k0 + 256) start in the row, and how many hold
  // `values` of them.
  static KQ_FN long long offset(const KqProductParams& p, long long k0) {
    if constexpr (kInt8 == 0) {
      return k0 / Kind::kValues * Kind::kBytes;
    } else if constexpr (kInt8 == 1) {
      return k0 / p.int8_block * (p.int8_block + 4);
    } else {
      return k0 / p.int8_block * (p.int8_block + 4) + 4 + k0 % p.int8_block;
    }
  }
  static KQ_FN long long bytes(const KqProductParams& p, long long values) {
    if constexpr (kInt8 == 0) {
      return values / Kind::kValues * Kind::kBytes;
    } else if constexpr (kInt8 == 1) {
      return values / p.int8_block * (p.int8_block + 4);
    } else {
      return values;
    }
  }
};

// The tile of values [k0, k0 + 256) of rows row0 .. row0 + 63 into stage, one row every
// kRowStride bytes: the aligned 16-byte words that hold its bytes, so a row's bytes start at
// (their global address % 16) in its slot. Rows past n are left as they are (never stored out).
template <class Kind, int kInt8, int kRowStride>
KQ_FN void kq_load_tile(const KqProductParams& p, unsigned char* stage, long long row0,
                        long long k0) {
  constexpr int kWords = kRowStride / 16;
  const long long values = kq_tile_values(p, k0);
  const long long offset = KqTiles<Kind, kInt8>::offset(p, k0);
  const long long bytes = KqTiles<Kind, kInt8>::bytes(p, values);
  for (int i = static_cast<int>(kq_thread()); i < kKqRows * kWords;
       i += static_cast<int>(kq_block_threads())) {
    const int r = i / kWords, word = i % kWords;
    const long long row = row0 + r;
    if (row >= p.n) continue;
    const unsigned long long start =
        p.weight + static_cast<unsigned long long>(row * p.row_bytes + offset);
    const long long words =
        static_cast<long long>((start & 15) + static_cast<unsigned long long>(bytes) + 15) >> 4;
    if (word < words)
      kq_copy16(stage + r * kRowStride + 16 * word, (start & ~15ull) + 16ull * word);
  }
}

// x's tile [k0, k0 + 256) for its rows col0 .. col0 + 8 kNt - 1 into stage (kTerms 0 or 1): each
// row's values (int8 codes, or 16-bit floats) at kq_x_stride bytes, then for int8 each row's
// blocks' scales at kKqXScaleStride. Rows past p.rows are zeros (their sums are never stored; the
// products read them unguarded).
template <int kTerms, int kNt>
KQ_FN void kq_load_x_tile(const KqProductParams& p, unsigned char* stage, long long col0,
                          long long k0) {
  constexpr int kCols = kNt * 8;
  constexpr int kValueBytes = kTerms == 0 ? 1 : 2;
  constexpr int kWords = kKqTile * kValueBytes / 16;           // of a row's values
  constexpr int kScaleWords = kTerms == 0 ? kKqTile / 32 : 0;  // of a row's scales
  const long long values = kq_tile_values(p, k0);
  const long long blocks = p.k / 32;
  unsigned char* scales = stage + kCols * kq_x_stride<kTerms>();
  for (int i = static_cast<int>(kq_thread()); i < kCols * (kWords + kScaleWords);
       i += static_cast<int>(kq_block_threads())) {
    if (i < kCols * kWords) {  // a 16-byte word of values
      const int c = i / kWords, word = i % kWords;
      unsigned char* dst = stage + c * kq_x_stride<kTerms>() + 16 * word;
      if (col0 + c >= p.rows) {
        kq_zero16(dst);
      } else if (16 * word < values * kValueBytes) {
        kq_copy16(dst, p.x + static_cast<unsigned long long>(((col0 + c) * p.k + k0) * kValueBytes +
                                                             16 * word));
      }
    } else {  // a block's four scales
      const int j = i - kCols * kWords, c = j / kScaleWords, b = j % kScaleWords;
      unsigned char* dst = scales + c * kKqXScaleStride + 16 * b;
      if (col0 + c >= p.rows) {
        kq_zero16(dst);
      } else if (32 * b < values) {
        kq_copy16(dst, p.x_scales + static_cast<unsigned long long>(
                                        ((col0 + c) * blocks + k0 / 32 + b) * 16));
      }
    }
  }
}

// A warp's rows ra (lane group g) and rb = ra + 8 in a stage: where their tile's first bytes are
// (at their global address % 16, as kq_load_tile copies them), and the low bits of that address.
struct KqStagedRows {
  const unsigned char* wa;
  const unsigned char* wb;
  unsigned from_a, from_b;
};
template <int kRowStride>
KQ_FN KqStagedRows kq_staged_rows(const KqProductParams& p, const unsigned char* stage,
                                  long long offset, int warp, int g, long long ra, long long rb) {
  KqStagedRows rows;
  rows.from_a =
      static_cast<unsigned>(p.weight + static_cast<unsigned long long>(ra * p.row_bytes + offset));
  rows.from_b =
      static_cast<unsigned>(p.weight + static_cast<unsigned long long>(rb * p.row_bytes + offset));
  rows.wa = stage + (warp * 16 + g) * kRowStride + (rows.from_a & 15);
  rows.wb = stage + (warp * 16 + g + 8) * kRowStride + (rows.from_b & 15);
  return rows;
}

// The block at byte block_at of a staged row (w, from: kq_staged_rows) as whole aligned words of
// the stage joined by funnel shifts (quant_blocks.h's KqStaged).
KQ_FN KqStaged kq_staged_at(const unsigned char* w, unsigned from, int block_at) {
  return kq_staged(w + block_at, (from + static_cast<unsigned>(block_at)) & 3);
}

// One staged tile into a warp's accumulators: its rows ra (lane group g) and rb = ra + 8, x's
// rows col0 + 8 nt + g.
template <class Kind, bool kBf16, int kTerms, int kNt, int kInt8, int kRowStride>
KQ_FN void kq_tile(const KqProductParams& p, const unsigned char* stage, long long k0, int warp,
                   int g, int t, long long ra, long long rb, long long col0, float (*acc)[4]) {
  constexpr int kSteps = kKqTile / Kind::kStep;
  constexpr int kChunks = Kind::kStep / 16;
  constexpr unsigned kOne = kBf16 ? 0x3F803F80u : 0x3C003C00u;
  const long long values = kq_tile_values(p, k0);
  const long long offset = KqTiles<Kind, kInt8>::offset(p, k0);
  const auto [wa, wb, from_a, from_b] =
      kq_staged_rows<kRowStride>(p, stage, offset, warp, g, ra, rb);
  float scale_a = 0.0f, scale_b = 0.0f;
  if constexpr (kInt8 == 2) {
    // The tile lies inside one block: its scale, read from the block's start.
    const auto* W = reinterpret_cast<const unsigned char*>(p.weight);
    const long long at = k0 / p.int8_block * (p.int8_block + 4);
    if (ra < p.n) scale_a = kq_f32(W + ra * p.row_bytes + at);
    if (rb < p.n) scale_b = kq_f32(W + rb * p.row_bytes + at);
  }
  const unsigned ones[4] = {kOne, kOne, kOne, kOne};
  const auto* X = reinterpret_cast<const unsigned short*>(p.x);
  const unsigned char* x_tile = stage + kKqRows * kRowStride;  // kTerms 1: x's staged tile
  KQ_UNROLL for (int s = 0; s < kSteps; ++s) {
    const int v = s * Kind::kStep;  // the step's first value in the tile
    if (v >= values) break;
    float mul_a, add_a, mul_b, add_b;
    unsigned a[kChunks][4];
    if constexpr (kInt8 == 0) {
      const int step = (v % Kind::kValues) / Kind::kStep;
      const int block_at = v / Kind::kValues * Kind::kBytes;
      const KqStaged sa = kq_staged_at(wa, from_a, block_at);
      const KqStaged sb = kq_staged_at(wb, from_b, block_at);
      Kind::scale(sa, step, mul_a, add_a);
      Kind::scale(sb, step, mul_b, add_b);
      KQ_UNROLL for (int h = 0; h < kChunks; ++h)
          kq_a_fragment<Kind, kBf16>(sa, sb, step, h, t, a[h]);
    } else {
      const unsigned char* qa;
      const unsigned char* qb;
      if constexpr (kInt8 == 1) {
        const long long block = v / p.int8_block, within = v % p.int8_block;
        const unsigned char* ba = wa + block * (p.int8_block + 4);
        const unsigned char* bb = wb + block * (p.int8_block + 4);
        mul_a = kq_f32(ba);
        mul_b = kq_f32(bb);
        qa = ba + 4 + within;
        qb = bb + 4 + within;
      } else {
        mul_a = scale_a;
        mul_b = scale_b;
        qa = wa + v;
        qb = wb + v;
      }
      add_a = add_b = 0.0f;
      kq_pack<kBf16, true, KqInt8::kBias>(KqInt8::codes(qa, t), a[0][0], a[0][2]);
      kq_pack<kBf16, true, KqInt8::kBias>(KqInt8::codes(qb, t), a[0][1], a[0][3]);
    }
    const long long k = k0 + v + 4 * t;
    KQ_UNROLL for (int nt = 0; nt < kNt; ++nt) {
      const long long col = col0 + nt * 8 + g;
      float codes[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      float xsum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      KQ_UNROLL for (int h = 0; h < kChunks; ++h) {
        KQ_UNROLL for (int term = 0; term < kTerms; ++term) {
          unsigned b0 = 0, b1 = 0;
          if constexpr (kTerms == 1) {  // staged, zeros past p.rows
            kq_shared8(x_tile + (nt * 8 + g) * kq_x_stride<1>() + 2 * (v + 16 * h + 4 * t), b0, b1);
          } else if (col < p.rows) {
            kq_load8(X + term * p.plane + col * p.k + k + 16 * h, b0, b1);
          }
          tensor_core::tc_mma<kBf16>(codes, a[h], b0, b1);
          if constexpr (Kind::kHasMin) tensor_core::tc_mma<kBf16>(xsum, ones, b0, b1);
        }
      }
      kq_apply<Kind::kHasMin>(acc[nt], codes, xsum, mul_a, add_a, mul_b, add_b);
    }
  }
}

// kq_tile for x rounded to int8 blocks of 32 (kiln_quant_round: codes, and per block the scale dx
// and dx times the sums of its codes), the codes multiplied on the integer tensor cores, exact in
// 32 bits. A kind without an addend multiplies the signed codes u - kBias (A, signed bytes), so a
// step adds mul (dx S), S = sum (u - kBias) xq, to each output; one with an addend (kBias 0)
// multiplies u as it is and adds mul (dx S) + add (dx sum xq).
template <class Kind>
KQ_FN unsigned kq_signed_codes(unsigned u) {
  if constexpr (Kind::kHasMin) {
    return u;
  } else if constexpr (Kind::kBias == 128) {
    return u ^ 0x80808080u;  // the stored signed bytes
  } else {
    // Each byte below 128: with its top bit set, kBias comes off without a borrow between bytes,
    // and clearing the bit again leaves u - kBias + 128 - 128 as a signed byte.
    return ((u | 0x80808080u) - static_cast<unsigned>(Kind::kBias) * 0x01010101u) ^ 0x80808080u;
  }
}
constexpr int kKqMagic = 0x4B400000;          // the bits of 1.5 * 2^23
constexpr float kKqMagicValue = 12582912.0f;  // 1.5 * 2^23
template <class Kind, int kNt, int kRowStride>
KQ_FN void kq_tile_int(const KqProductParams& p, const unsigned char* stage, long long k0, int warp,
                       int g, int t, long long ra, long long rb, float (*acc)[4]) {
  constexpr int kSteps = kKqTile / Kind::kStep;
  constexpr bool kK16 = Kind::kStep == 16;
  const long long values = kq_tile_values(p, k0);
  const long long offset = KqTiles<Kind, 0>::offset(p, k0);
  const auto [wa, wb, from_a, from_b] =
      kq_staged_rows<kRowStride>(p, stage, offset, warp, g, ra, rb);
  const unsigned char* x_codes = stage + kKqRows * kRowStride;
  const unsigned char* x_scales = x_codes + kNt * 8 * kq_x_stride<0>();
  KQ_UNROLL for (int s = 0; s < kSteps; ++s) {
    const int v = s * Kind::kStep;  // the step's first value in the tile
    if (v >= values) break;
    const int block_at = v / Kind::kValues * Kind::kBytes;
    const int step = (v % Kind::kValues) / Kind::kStep;
    const KqStaged sa = kq_staged_at(wa, from_a, block_at);
    const KqStaged sb = kq_staged_at(wb, from_b, block_at);
    float mul_a, add_a, mul_b, add_b;
    Kind::scale(sa, step, mul_a, add_a);
    Kind::scale(sb, step, mul_b, add_b);
    unsigned a[4];
    a[0] = kq_signed_codes<Kind>(Kind::codes(sa, step, 0, t));
    a[1] = kq_signed_codes<Kind>(Kind::codes(sb, step, 0, t));
    if constexpr (!kK16) {
      a[2] = kq_signed_codes<Kind>(Kind::codes(sa, step, 1, t));
      a[3] = kq_signed_codes<Kind>(Kind::codes(sb, step, 1, t));
    }
    // x's block of 32 in the tile holding the step, and which half of it the step is (steps of
    // 16); the block's codes are stored as lane t's eight, values 4t .. 4t + 3 then 16 + 4t ..
    // 16 + 4t + 3.
    const int block = v / 32;
    const int half = kK16 ? v / 16 % 2 : 0;
    KQ_UNROLL for (int nt = 0; nt < kNt; ++nt) {
      unsigned b[2];
      kq_shared8(x_codes + (nt * 8 + g) * kq_x_stride<0>() + 32 * block + 8 * t, b[0], b[1]);
      // The sums start at the bits of 1.5 * 2^23, a float whose spacing is 1: S (|S| < 2^22) added
      // to them is the float 1.5 * 2^23 + S, and taking 1.5 * 2^23 off gives S exactly, without
      // a (quarter-rate) conversion.
      int sums[4] = {kKqMagic, kKqMagic, kKqMagic, kKqMagic};
      kq_mma_i8<kK16, !Kind::kHasMin>(sums, a, b[half], b[1]);
      // C's columns 2t, 2t + 1 of the tile: x's rows col0 + 8 nt + 2t + j, their block's dx and
      // dx sum xq (zeros past p.rows).
      KQ_UNROLL for (int j = 0; j < 2; ++j) {
        const auto* sc = reinterpret_cast<const float*>(
            x_scales + (nt * 8 + 2 * t + j) * kKqXScaleStride + 16 * block);
        const float dx = sc[0];
        acc[nt][j] += mul_a * (dx * (kq_bits_f32(static_cast<unsigned>(sums[j])) - kKqMagicValue));
        acc[nt][2 + j] +=
            mul_b * (dx * (kq_bits_f32(static_cast<unsigned>(sums[2 + j])) - kKqMagicValue));
        if constexpr (Kind::kHasMin) {
          const float xsum = sc[kK16 ? 2 + half : 1];
          acc[nt][j] += add_a * xsum;
          acc[nt][2 + j] += add_b * xsum;
        }
      }
    }
  }
}

// After a split's partial sums are stored: the block that finishes last among the splits of
// tile `rest` (a ticket of its counter, which it sets back to 0 for the next launch) sums the
// splits' partials in split order and writes the output. The counters start at 0 and every
// launch leaves them so (Context::split_counters).
template <class Out, int kColumns>
KQ_FN void kq_finish(const KqProductParams& p, unsigned char* smem, int rest, long long row0,
                     long long col0, int tile_rows) {
  kq_fence();
  kq_sync();  // every thread's partial sums are stored and fenced before the block's ticket
  auto* last = reinterpret_cast<volatile unsigned*>(smem);  // the stages are read by now
  if (kq_thread() == 0) {
    unsigned* counter = reinterpret_cast<unsigned*>(p.counters) + rest;
    const bool is_last = kq_ticket(counter) == static_cast<unsigned>(p.splits - 1);
    if (is_last) *counter = 0;
    *last = is_last ? 1u : 0u;
  }
  kq_sync();
  if (*last == 0) return;
  kq_fence();  // the other splits' sums, fenced before their tickets, are seen after ours
  const auto* partial = reinterpret_cast<const float*>(p.partial);
  const long long plane = p.rows * p.n;
  for (int i = static_cast<int>(kq_thread()); i < tile_rows * kColumns;
       i += static_cast<int>(kq_block_threads())) {
    const long long row = row0 + i % tile_rows, c = col0 + i / tile_rows;
    if (row >= p.n || c >= p.rows) continue;
    const long long at = c * p.n + row;
    float s = kq_load_l2(partial + at);
    for (int j = 1; j < p.splits; ++j) s += kq_load_l2(partial + j * plane + at);
    Out::store(p, at, row, s);
  }
}

// Block b: split b % splits of k, then the group of x's rows, then 64 rows of W. Tiles stream
// through kStages stages of smem (W's rows, and x's rows unless x is f32's three parts, which
// kq_tile reads from global memory): the copies of the next ones are in flight while this one is
// multiplied. Every iteration commits one group (maybe empty), so waiting for all but the newest
// kStages - 2 means the tile about to be read is in. With one split the sums go straight out
// (Out::store adds the bias and writes the output's dtype); with several, each split writes its
// partial sums and the last of them to finish sums all splits in order (kq_finish), so one launch
// serves and no second kernel's start is paid.
template <class Kind, bool kBf16, int kTerms, int kNt, int kInt8, int kRowStride, int kStages,
          class Out>
KQ_FN void kq_product(const KqProductParams& p, unsigned char* smem) {
  constexpr int kStage = kq_stage_bytes<kTerms, kNt, kRowStride>();
  const int thread = static_cast<int>(kq_thread());
  const int warp = thread >> 5, lane = thread & 31, g = lane >> 2, t = lane & 3;
  const int split = static_cast<int>(kq_block() % static_cast<unsigned>(p.splits));
  const int rest = static_cast<int>(kq_block() / static_cast<unsigned>(p.splits));
  const long long col0 = static_cast<long long>(rest % p.column_groups) * (kNt * 8);
  const long long row0 = static_cast<long long>(rest / p.column_groups) * kKqRows;
  const long long ra = row0 + warp * 16 + g, rb = ra + 8;
  const long long tiles = (p.k + kKqTile - 1) / kKqTile;
  const long long first = static_cast<long long>(split) * p.tiles_per_split;
  long long end = first + p.tiles_per_split;
  if (end > tiles) end = tiles;
  const int count = end > first ? static_cast<int>(end - first) : 0;
  float acc[kNt][4];
  KQ_UNROLL for (int nt = 0; nt < kNt; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] =
      0.0f;

  // Tile i of the split into stage i % kStages: W's rows, and x's where it is staged.
  auto load_w = [&](int i) {
    kq_load_tile<Kind, kInt8, kRowStride>(p, smem + (i % kStages) * kStage, row0,
                                          (first + i) * kKqTile);
  };
  auto load_x = [&](int i) {
    if constexpr (kTerms <= 1) {
      kq_load_x_tile<kTerms, kNt>(p, smem + (i % kStages) * kStage + kKqRows * kRowStride, col0,
                                  (first + i) * kKqTile);
    }
  };
  // The first tiles of the weight before the wait for the launch before this one, which may still
  // be running but writes no weight (kiln_quant_round or another product:
  // LaunchOrder::OverlappingWeightReader); x, the partial sums and the output after it. The
  // weight's copies join tile 0's group.
  KQ_UNROLL for (int s = 0; s < kStages - 1; ++s) {
    if (s < count) load_w(s);
  }
  kq_grid_dependency();
  KQ_UNROLL for (int s = 0; s < kStages - 1; ++s) {
    if (s < count) load_x(s);
    kq_commit();
  }
  for (int it = 0; it < count; ++it) {
    kq_wait<kStages - 2>();
    kq_sync();  // every thread's copies of tile it are in; every warp is done with tile it - 1
    if (it + kStages - 1 < count) {
      load_w(it + kStages - 1);
      load_x(it + kStages - 1);
    }
    kq_commit();
    if constexpr (kTerms == 0) {
      kq_tile_int<Kind, kNt, kRowStride>(p, smem + (it % kStages) * kStage, (first + it) * kKqTile,
                                         warp, g, t, ra, rb, acc);
    } else {
      kq_tile<Kind, kBf16, kTerms, kNt, kInt8, kRowStride>(
          p, smem + (it % kStages) * kStage, (first + it) * kKqTile, warp, g, t, ra, rb, col0, acc);
    }
  }

  // C fragments: acc[nt][0..1] are row ra's sums for x's rows col0 + 8 nt + 2t (+ 1), [2..3]
  // row rb's.
  float* partial =
      reinterpret_cast<float*>(p.partial) + static_cast<long long>(split) * p.rows * p.n;
  auto put = [&](long long c, long long row, float s) {
    if (c >= p.rows || row >= p.n) return;
    if (p.splits == 1) {
      Out::store(p, c * p.n + row, row, s);
    } else {
      partial[c * p.n + row] = s;
    }
  };
  KQ_UNROLL for (int nt = 0; nt < kNt; ++nt) {
    const long long c = col0 + nt * 8 + 2 * t;
    put(c, ra, acc[nt][0]);
    put(c, rb, acc[nt][2]);
    put(c + 1, ra, acc[nt][1]);
    put(c + 1, rb, acc[nt][3]);
  }
  if (p.splits > 1) kq_finish<Out, kNt * 8>(p, smem, rest, row0, col0, kKqRows);
}

// ---- kiln_quant_matvec ----
// y[rows, n] = x[rows, k] · W[n, k]ᵀ for a few rows of x, any GGUF kind: the matrix-vector
// products of decoding, where the weight is read once and the time is the time to read it. A
// block takes all kCols (1, 2, 4) rows of x: from 5 rows on the tiled kernel was faster
// (docs/quantization-gpu.md). x is rounded to int8 blocks of 32 values first (scale amax / 127,
// as the CPU's quantize_int8 and llama.cpp's q8_1 do), so a step of the weight's codes is one dp4a
// instruction per 4 values and row of x: value = mul (u - kBias) + add (quant_blocks.h's product
// reading) gives sum x·value = dx (mul (sum u·xq - kBias sum xq) + add sum xq).
//
// A split of k is a chunk of kPieces × 1024 values (tiles_per_split blocks of 32); lane l
// multiplies values 32 l + 1024 j .. + 31 (j < kPieces) of the chunk, whose x codes it holds in
// registers, so a row's fixed costs (its copy's addresses, the wait, the sum over the warp) are
// paid once per kPieces blocks of x. A block of 8 warps takes 8 × warp_rows rows of W, warp w
// its rows w, w + 8, ...; each warp streams them through kStages stages of its own shared memory
// (cp.async), sums a row over its lanes as soon as it is multiplied and writes it (lane 0). The
// host picks warp_rows so that the grid is one wave of resident blocks. Splits are summed as
// kiln_quant_product's are (kq_finish). A block of x with a NaN or an infinity gives NaN.
constexpr int kKqMvWarps = 8;
constexpr int kKqMvPiece = 1024;  // values of k a piece: 32 per lane

// Shared memory of one warp's stage: a row's chunk at any of 16 starting offsets, and 8 bytes
// after it for the whole words the readers take (kq_load_words, KqStaged).
template <class Kind, int kPieces>
constexpr int kq_mv_stage_bytes() {
  return (kPieces * kKqMvPiece / Kind::kValues * Kind::kBytes + 15 + 8 + 15) / 16 * 16;
}
// x's codes [kCols][chunk] bytes, scales [kCols][chunk / 32] floats, sums of 16 codes
// [kCols][chunk / 16] ints.
template <int kCols, int kPieces>
constexpr int kq_mv_x_bytes() {
  return kCols * kPieces * (kKqMvPiece + 32 * 4 + 64 * 4);
}

// x's value i as f32: kX 0 f32, 1 bf16, 2 f16.
template <int kX>
KQ_FN float kq_x_value(unsigned long long x, long long i) {
  if constexpr (kX == 0) {
    return reinterpret_cast<const float*>(x)[i];
  } else {
    const unsigned bits = reinterpret_cast<const unsigned short*>(x)[i];
#ifdef __CUDACC_RTC__
    return kX == 1 ? __uint_as_float(bits << 16) : kq_half(bits);
#else
    return kq_elem_to_float(bits, kX == 1);
#endif
  }
}

// Values 4 part .. 4 part + 3 (v) of a block of 32 held by 8 lanes (part = lane % 8, the
// block's amax and finiteness shared by shuffles, so all 32 lanes take part): x rounded to int8
// with scale d = amax / 127, code round(v / d) (halves away from zero) within +-127, as the CPU's
// quantize_int8 and llama.cpp's q8_1 do. Gives d (NaN where the block holds a NaN or an infinity,
// whose codes are then 0), the part's codes in the bytes of `word`, and in `half_sum` the sum of
// the codes of its half of the block (parts 0..3 or 4..7).
KQ_FN float kq_round_part(const float* v, unsigned& word, int& half_sum) {
  float amax = 0.0f;
  unsigned finite = 1;
  KQ_UNROLL for (int e = 0; e < 4; ++e) {
    const float a = v[e] < 0.0f ? -v[e] : v[e];
    if (!(a <= 3.40282347e38f)) finite = 0;  // NaN or infinity
    amax = a > amax ? a : amax;
  }
  KQ_UNROLL for (int o = 1; o < 8; o <<= 1) {
    const float other = kq_bits_f32(kq_shfl_xor(kq_f32_bits(amax), o));
    amax = other > amax ? other : amax;
    finite &= kq_shfl_xor(finite, o);
  }
  const float d = amax / 127.0f;
  word = 0;
  int sum = 0;
  KQ_UNROLL for (int e = 0; e < 4; ++e) {
    float q = d != 0.0f ? kq_round(v[e] / d) : 0.0f;
    q = q > 127.0f ? 127.0f : (q < -127.0f ? -127.0f : q);
    const int code = finite != 0 ? static_cast<int>(q) : 0;
    word |= (static_cast<unsigned>(code) & 0xFFu) << (8 * e);
    sum += code;
  }
  sum += static_cast<int>(kq_shfl_xor(static_cast<unsigned>(sum), 1));
  sum += static_cast<int>(kq_shfl_xor(static_cast<unsigned>(sum), 2));
  half_sum = sum;
  return finite != 0 ? d : kq_nan();
}

// The chunk [k0, k0 + values) of x's rows 0 .. kCols - 1 as int8 blocks of 32 into shared
// memory: 8 lanes a block, 4 values a lane (the block's amax, finiteness and sums of 16 codes
// shared by shuffles), so every thread of the block takes part and the quantization takes the
// time of a few values. Rows past p.rows and blocks past the chunk are zeros.
template <int kCols, int kPieces, int kX>
KQ_FN void kq_mv_quantize_x(const KqProductParams& p, long long k0, long long values,
                            unsigned char* codes, float* scales, int* sums) {
  constexpr int kBlocks = 32 * kPieces;  // blocks of 32 values in a chunk
  // kCols * kBlocks * 8 tasks over the block's 256 threads: every lane makes the same number of
  // turns, and every turn's values are loaded before the first is rounded (one wait for x, not
  // one a turn).
  constexpr int kTurns = kCols * kBlocks * 8 / (kKqMvWarps * 32);
  const int blocks = static_cast<int>(values / 32);
  float loaded[kTurns][4];
  KQ_UNROLL for (int turn = 0; turn < kTurns; ++turn) {
    const int task = static_cast<int>(kq_thread()) + turn * kKqMvWarps * 32;
    const int block = task / 8, part = task % 8;
    const int c = block / kBlocks, b = block % kBlocks;
    const long long at = c * p.k + k0 + 32 * b + 4 * part;
    KQ_UNROLL for (int e = 0; e < 4; ++e) loaded[turn][e] =
        c < p.rows && b < blocks ? kq_x_value<kX>(p.x, at + e) : 0.0f;
  }
  KQ_UNROLL for (int turn = 0; turn < kTurns; ++turn) {
    const int task = static_cast<int>(kq_thread()) + turn * kKqMvWarps * 32;
    const int block = task / 8, part = task % 8;  // values 4 part .. 4 part + 3 of the block
    const int c = block / kBlocks, b = block % kBlocks;
    unsigned word;
    int sum;  // loaded[turn] is zeros for rows past p.rows and blocks past the chunk
    const float d = kq_round_part(loaded[turn], word, sum);
    reinterpret_cast<unsigned*>(codes + c * kBlocks * 32 + 32 * b)[part] = word;
    if (part == 0) scales[c * kBlocks + b] = d;
    if (part % 4 == 0) sums[c * 2 * kBlocks + 2 * b + part / 4] = sum;
  }
}

template <class Kind, int kCols, int kPieces, int kStages, int kX, class Out>
KQ_FN void kq_matvec(const KqProductParams& p, unsigned char* smem) {
  constexpr int kStage = kq_mv_stage_bytes<Kind, kPieces>();
  constexpr int kBlocks = 32 * kPieces;
  constexpr int kStepsPerLane = 32 / Kind::kStep;  // 1, or 2 where a scale covers 16 values
  constexpr int kChunksPerStep = Kind::kStep / 16;
  const int thread = static_cast<int>(kq_thread());
  const int warp = thread >> 5, lane = thread & 31;
  // Block b: split b % splits of k, then the tile of W's rows.
  const int split = static_cast<int>(kq_block() % static_cast<unsigned>(p.splits));
  const int tile = static_cast<int>(kq_block() / static_cast<unsigned>(p.splits));
  const int warp_rows = p.warp_rows;
  const long long row0 = static_cast<long long>(tile) * kKqMvWarps * warp_rows;
  const long long chunk = static_cast<long long>(p.tiles_per_split) * 32;
  const long long k0 = split * chunk;
  const long long values = p.k - k0 < chunk ? p.k - k0 : chunk;
  const long long offset = KqTiles<Kind, 0>::offset(p, k0);
  const long long bytes = KqTiles<Kind, 0>::bytes(p, values);
  unsigned char* stages = smem + warp * kStages * kStage;
  unsigned char* x_codes = smem + kKqMvWarps * kStages * kStage;
  float* x_scales = reinterpret_cast<float*>(x_codes + kCols * kBlocks * 32);
  int* x_sums = reinterpret_cast<int*>(x_scales + kCols * kBlocks);

  // Row i of this warp (row0 + warp + 8 i) into stage `stage`: the aligned words that hold its
  // chunk's bytes, which start at (their address % 16) in the stage. One group per call.
  auto load_row = [&](int i, int stage) {
    const long long row = row0 + warp + kKqMvWarps * i;
    if (i < warp_rows && row < p.n) {
      const unsigned long long start =
          p.weight + static_cast<unsigned long long>(row * p.row_bytes + offset);
      const int words =
          static_cast<int>(((start & 15) + static_cast<unsigned long long>(bytes) + 15) >> 4);
      for (int w = lane; w < words; w += 32)
        kq_copy16(stages + stage * kStage + 16 * w, (start & ~15ull) + 16ull * w);
    }
    kq_commit();
  };
  KQ_UNROLL for (int s = 0; s < kStages - 1; ++s) load_row(s, s);
  // Only the weight was read so far: the launch before this one may still be running, but it
  // writes no weight (LaunchOrder::OverlappingWeightReader); x, the partial sums and the output
  // may be its. Past the wait it has completed, and the next launch may start.
  kq_grid_dependency();
  // x's chunk while the first rows are on their way.
  kq_mv_quantize_x<kCols, kPieces, kX>(p, k0, values, x_codes, x_scales, x_sums);
  kq_sync();
  unsigned xq[kCols][kPieces][8];
  float dx[kCols][kPieces];
  int xs[kCols][kPieces][2];
  KQ_UNROLL for (int c = 0; c < kCols; ++c) {
    KQ_UNROLL for (int j = 0; j < kPieces; ++j) {
      const int b = lane + 32 * j;  // the piece's block of 32 values in the chunk
      const unsigned* words = reinterpret_cast<const unsigned*>(x_codes + (c * kBlocks + b) * 32);
      KQ_UNROLL for (int w = 0; w < 8; ++w) xq[c][j][w] = words[w];
      dx[c][j] = x_scales[c * kBlocks + b];
      xs[c][j][0] = x_sums[c * 2 * kBlocks + 2 * b];
      xs[c][j][1] = x_sums[c * 2 * kBlocks + 2 * b + 1];
    }
  }
  float* partial =
      reinterpret_cast<float*>(p.partial) + static_cast<long long>(split) * p.rows * p.n;

  for (int i = 0; i < warp_rows; ++i) {
    load_row(i + kStages - 1, (i + kStages - 1) % kStages);
    kq_wait<kStages - 1>();
    kq_warp_sync();  // every lane's copies of row i are in
    const long long row = row0 + warp + kKqMvWarps * i;
    if (row >= p.n) break;  // the same in every lane; the warp's later rows are past n too
    const unsigned long long start =
        p.weight + static_cast<unsigned long long>(row * p.row_bytes + offset);
    const unsigned char* chunk_bytes = stages + (i % kStages) * kStage + (start & 15);
    float sum[kCols];
    KQ_UNROLL for (int c = 0; c < kCols; ++c) sum[c] = 0.0f;
    KQ_UNROLL for (int j = 0; j < kPieces; ++j) {
      const int first = 32 * (lane + 32 * j);  // the piece's first value in the chunk
      if (first >= values) continue;
      // The piece's step(s) of its block b of the kind, codes(s, h, t) the codes of values
      // 16 h + 4t .. of its step first_step + s.
      auto multiply = [&](const auto& b, int first_step, const auto& codes_of) {
        KQ_UNROLL for (int s = 0; s < kStepsPerLane; ++s) {
          float mul, add;
          Kind::scale(b, first_step + s, mul, add);
          unsigned u[kChunksPerStep * 4];
          KQ_UNROLL for (int h = 0; h < kChunksPerStep; ++h) {
            KQ_UNROLL for (int t = 0; t < 4; ++t) u[4 * h + t] = codes_of(s, h, t);
          }
          KQ_UNROLL for (int c = 0; c < kCols; ++c) {
            int dot = 0;
            KQ_UNROLL for (int w = 0; w < kChunksPerStep * 4; ++w) dot =
                kq_dp4a(u[w], xq[c][j][kChunksPerStep * 4 * s + w], dot);
            const int codes = kStepsPerLane == 1 ? xs[c][j][0] + xs[c][j][1] : xs[c][j][s];
            sum[c] += dx[c][j] * (mul * static_cast<float>(dot - Kind::kBias * codes) +
                                  add * static_cast<float>(codes));
          }
        }
      };
      // The block in the stage, whose 16-byte words hold the row's from its start: the block's
      // address % 4 is its global address's.
      const int block_at = first / Kind::kValues * Kind::kBytes;
      const unsigned misaligned = (static_cast<unsigned>(start) + block_at) & 3;
      // multiply() with the kind's own codes(b, step, h, t).
      auto multiply_block = [&](const auto& b, int step0) {
        multiply(b, step0, [&](int s, int h, int t) { return Kind::codes(b, step0 + s, h, t); });
      };
      const int first_step = first % Kind::kValues / Kind::kStep;
      const unsigned char* block = chunk_bytes + block_at;
      if constexpr (Kind::kValues == 32) {
        // The whole block is the piece's: its words into registers once, every reading after
        // that a pick of registers.
        multiply_block(kq_load_words<(Kind::kBytes + 3) / 4>(block, misaligned), 0);
      } else if constexpr (KqLaneRuns<Kind>::value) {
        // The piece's codes are two runs of 32 bytes of the block (quant_blocks.h's kLaneRuns),
        // each into registers once; its scales read through KqStaged.
        const unsigned at = static_cast<unsigned>(start) + block_at;
        const int r0 = Kind::run0(first_step), r1 = Kind::run1(first_step);
        const auto run0 = kq_load_words<8>(block + r0, (at + r0) & 3);
        const auto run1 = kq_load_words<8>(block + r1, (at + r1) & 3);
        multiply(kq_staged(block, misaligned), first_step,
                 [&](int s, int, int t) { return Kind::run_codes(run0, run1, first_step, s, t); });
      } else if constexpr (Kind::kBytes % 4 == 0) {
        // The piece is a part of the block. Blocks of whole words start where the row does: on a
        // word (the usual case: the same in every lane of the warp), each read is one load.
        if (misaligned == 0) {
          multiply_block(KqAligned{reinterpret_cast<const unsigned*>(block)}, first_step);
        } else {
          multiply_block(kq_staged(block, misaligned), first_step);
        }
      } else {
        // The piece is a part of the block: whole aligned words, joined by funnel shifts.
        multiply_block(kq_staged(block, misaligned), first_step);
      }
    }
    kq_warp_sync();  // every lane is done with row i's stage before it is refilled
    KQ_UNROLL for (int c = 0; c < kCols; ++c) {
      const float total = kq_warp_sum(sum[c]);
      if (lane == 0 && c < p.rows) {
        if (p.splits == 1) {
          Out::store(p, c * p.n + row, row, total);
        } else {
          partial[c * p.n + row] = total;
        }
      }
    }
  }
  if (p.splits > 1) kq_finish<Out, kCols>(p, smem, tile, row0, 0, kKqMvWarps * warp_rows);
}

// ---- kiln_quant_round ----
// Mirrors QuantRoundParams (quant.h).
struct KqRoundParams {
  unsigned long long x, codes, scales;
  long long rows, k;
};
// x [rows, k] (k a multiple of 32; kX as kq_x_value) rounded to int8 blocks of 32 as
// kq_round_part rounds them, for kiln_quant_product's integer path (kq_tile_int): each block's
// codes as lane t's eight bytes of the tensor-core operand (values 4t .. 4t + 3, then 16 + 4t ..
// 16 + 4t + 3), and four floats: dx, dx times the sum of the block's codes, dx times the sums of
// its two halves (NaN for a block that holds a NaN or an infinity). Eight lanes a block; every
// lane of a warp takes the same turns, so the shuffles always have their partners.
template <int kX>
KQ_FN void kq_round_x(const KqRoundParams& p) {
  // x may be the output of the launch before this one (LaunchOrder::OverlappingWeightReader);
  // past the wait the product after this launch may start streaming its weight in.
  kq_grid_dependency();
  const long long tasks = p.rows * (p.k / 32) * 8;
  const long long stride = static_cast<long long>(kq_grid_blocks()) * kq_block_threads();
  const long long lane = kq_thread() % 32;
  for (long long i = static_cast<long long>(kq_block()) * kq_block_threads() + kq_thread();
       i - lane < tasks; i += stride) {
    const long long block = i / 8;  // of the rows' blocks, row by row
    const int part = static_cast<int>(i % 8);
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (i < tasks) {
      KQ_UNROLL for (int e = 0; e < 4; ++e) v[e] = kq_x_value<kX>(p.x, 32 * block + 4 * part + e);
    }
    unsigned word;
    int half_sum;
    const float d = kq_round_part(v, word, half_sum);
    const int other_half = static_cast<int>(kq_shfl_xor(static_cast<unsigned>(half_sum), 4));
    if (i >= tasks) continue;
    auto* codes = reinterpret_cast<unsigned char*>(p.codes) + 32 * block;
    reinterpret_cast<unsigned*>(codes)[2 * (part % 4) + part / 4] = word;
    if (part == 0) {
      float* scales = reinterpret_cast<float*>(p.scales) + 4 * block;
      scales[0] = d;
      scales[1] = d * kq_int(half_sum + other_half);
      scales[2] = d * kq_int(half_sum);
      scales[3] = d * kq_int(other_half);
    }
  }
}

// ---- kiln_quant_split ----
// Mirrors QuantSplitParams (quant.h).
struct KqSplitParams {
  unsigned long long x, out;
  long long total;
};
KQ_FN void kq_split(const KqSplitParams& p) {
  const auto* x = reinterpret_cast<const float*>(p.x);
  auto* out = reinterpret_cast<unsigned short*>(p.out);
  const long long step = static_cast<long long>(kq_grid_blocks()) * kq_block_threads();
  for (long long i = static_cast<long long>(kq_block()) * kq_block_threads() + kq_thread();
       i < p.total; i += step) {
    unsigned short parts[3];
    kq_split3(x[i], parts);
    out[i] = parts[0];
    out[p.total + i] = parts[1];
    out[2 * p.total + i] = parts[2];
  }
}

}  // namespace kiln::cuda::quant_blocks

#endif  // KILN_CUDA_QUANT_KERNELS_H
