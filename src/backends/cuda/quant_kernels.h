// The bodies of the quantized kernels (quant.h), one text for two compilers like quant_blocks.h
// (which it follows in every generated module): NVRTC compiles it, each kernel an instance of a
// template here (quant_source.cpp writes the extern "C" entry), and the host tests run the same
// templates on an emulated grid, a host thread per CUDA thread (tests/gpu/quant_emulator.h), so
// the staging, the splits and every index are checked without a GPU. Under NVRTC the primitives
// below are CUDA's (threadIdx, __syncthreads, mma.sync, cp.async); on the host they are declared
// here and defined by the emulator.
#ifndef KILN_CUDA_QUANT_KERNELS_H
#define KILN_CUDA_QUANT_KERNELS_H

namespace kiln::cuda::quant_blocks {

// ---- the primitives ----
#ifdef __CUDACC_RTC__
KQ_FN unsigned kq_thread() { return threadIdx.x; }
KQ_FN unsigned kq_block() { return blockIdx.x; }
KQ_FN unsigned kq_block_threads() { return blockDim.x; }
KQ_FN unsigned kq_grid_blocks() { return gridDim.x; }
KQ_FN void kq_sync() { __syncthreads(); }
// c += A b on the tensor cores (PTX's m16n8k16 fragments; quant_blocks.h's kq_a_fragment).
template <bool kBf16>
KQ_FN void kq_mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}
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
// Two words of x (four 16-bit values) through the read-only path.
KQ_FN void kq_load8(const unsigned short* at, unsigned& lo, unsigned& hi) {
  const uint2 v = __ldg(reinterpret_cast<const uint2*>(at));
  lo = v.x;
  hi = v.y;
}
#else
unsigned kq_thread();
unsigned kq_block();
unsigned kq_block_threads();
unsigned kq_grid_blocks();
void kq_sync();
void kq_host_mma(float* c, const unsigned* a, unsigned b0, unsigned b1, bool bf16);
template <bool kBf16>
inline void kq_mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  kq_host_mma(c, a, b0, b1, kBf16);
}
inline void kq_copy16(unsigned char* dst, unsigned long long src) {
  std::memcpy(dst, reinterpret_cast<const void*>(src), 16);
}
inline void kq_commit() {}
template <int kPending>
inline void kq_wait() {}
inline void kq_store8(float* out, const float* v) { std::memcpy(out, v, 32); }
inline void kq_load8(const unsigned short* at, unsigned& lo, unsigned& hi) {
  std::memcpy(&lo, at, 4);
  std::memcpy(&hi, at + 2, 4);
}
#endif

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
  unsigned long long weight, x, partial;
  long long n, k, rows, row_bytes, plane, int8_block;
  int row_tiles, column_groups, splits, tiles_per_split;
};

constexpr int kKqRows = 64;   // weight rows per block of threads: 4 warps of 16
constexpr int kKqTile = 256;  // values of a row per stage

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
  long long values = p.k - k0;
  if (values > kKqTile) values = kKqTile;
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

// One staged tile into a warp's accumulators: its rows ra (lane group g) and rb = ra + 8, x's
// rows col0 + 8 nt + g.
template <class Kind, bool kBf16, int kTerms, int kNt, int kInt8, int kRowStride>
KQ_FN void kq_tile(const KqProductParams& p, const unsigned char* stage, long long k0, int warp,
                   int g, int t, long long ra, long long rb, long long col0, float (*acc)[4]) {
  constexpr int kSteps = kKqTile / Kind::kStep;
  constexpr int kChunks = Kind::kStep / 16;
  constexpr unsigned kOne = kBf16 ? 0x3F803F80u : 0x3C003C00u;
  long long values = p.k - k0;
  if (values > kKqTile) values = kKqTile;
  const long long offset = KqTiles<Kind, kInt8>::offset(p, k0);
  const unsigned char* wa =
      stage + (warp * 16 + g) * kRowStride +
      ((p.weight + static_cast<unsigned long long>(ra * p.row_bytes + offset)) & 15);
  const unsigned char* wb =
      stage + (warp * 16 + g + 8) * kRowStride +
      ((p.weight + static_cast<unsigned long long>(rb * p.row_bytes + offset)) & 15);
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
  KQ_UNROLL for (int s = 0; s < kSteps; ++s) {
    const int v = s * Kind::kStep;  // the step's first value in the tile
    if (v >= values) break;
    float mul_a, add_a, mul_b, add_b;
    unsigned a[kChunks][4];
    if constexpr (kInt8 == 0) {
      const unsigned char* ba = wa + v / Kind::kValues * Kind::kBytes;
      const unsigned char* bb = wb + v / Kind::kValues * Kind::kBytes;
      const int step = (v % Kind::kValues) / Kind::kStep;
      Kind::scale(ba, step, mul_a, add_a);
      Kind::scale(bb, step, mul_b, add_b);
      KQ_UNROLL for (int h = 0; h < kChunks; ++h)
          kq_a_fragment<Kind, kBf16>(ba, bb, step, h, t, a[h]);
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
          if (col < p.rows) kq_load8(X + term * p.plane + col * p.k + k + 16 * h, b0, b1);
          kq_mma<kBf16>(codes, a[h], b0, b1);
          if constexpr (Kind::kHasMin) kq_mma<kBf16>(xsum, ones, b0, b1);
        }
      }
      kq_apply<Kind::kHasMin>(acc[nt], codes, xsum, mul_a, add_a, mul_b, add_b);
    }
  }
}

// Block b: split b % splits of k, then the group of x's rows, then 64 rows of W. Tiles stream
// through kStages stages of smem: the copies of the next ones are in flight while this one is
// multiplied. Every iteration commits one group (maybe empty), so waiting for all but the newest
// kStages - 2 means the tile about to be read is in. Each split writes its own partial sums.
template <class Kind, bool kBf16, int kTerms, int kNt, int kInt8, int kRowStride, int kStages>
KQ_FN void kq_product(const KqProductParams& p, unsigned char* smem) {
  constexpr int kStage = kKqRows * kRowStride;
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

  KQ_UNROLL for (int s = 0; s < kStages - 1; ++s) {
    if (s < count)
      kq_load_tile<Kind, kInt8, kRowStride>(p, smem + s * kStage, row0, (first + s) * kKqTile);
    kq_commit();
  }
  for (int it = 0; it < count; ++it) {
    kq_wait<kStages - 2>();
    kq_sync();  // every thread's copies of tile it are in; every warp is done with tile it - 1
    const int next = it + kStages - 1;
    if (next < count) {
      kq_load_tile<Kind, kInt8, kRowStride>(p, smem + (next % kStages) * kStage, row0,
                                            (first + next) * kKqTile);
    }
    kq_commit();
    kq_tile<Kind, kBf16, kTerms, kNt, kInt8, kRowStride>(
        p, smem + (it % kStages) * kStage, (first + it) * kKqTile, warp, g, t, ra, rb, col0, acc);
  }

  // C fragments: acc[nt][0..1] are row ra's sums for x's rows col0 + 8 nt + 2t (+ 1), [2..3]
  // row rb's.
  float* out = reinterpret_cast<float*>(p.partial) + static_cast<long long>(split) * p.rows * p.n;
  KQ_UNROLL for (int nt = 0; nt < kNt; ++nt) {
    const long long c = col0 + nt * 8 + 2 * t;
    if (c < p.rows) {
      if (ra < p.n) out[c * p.n + ra] = acc[nt][0];
      if (rb < p.n) out[c * p.n + rb] = acc[nt][2];
    }
    if (c + 1 < p.rows) {
      if (ra < p.n) out[(c + 1) * p.n + ra] = acc[nt][1];
      if (rb < p.n) out[(c + 1) * p.n + rb] = acc[nt][3];
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
