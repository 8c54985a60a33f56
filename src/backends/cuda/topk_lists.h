// The register-resident lists of the selection topk, one text for two compilers: NVRTC compiles
// it into every topk kernel (CMake embeds it as the string kTopkListsSource, topk_source.cpp),
// and the host tests include it to check the networks against std::sort without a GPU. So it
// includes nothing and names no std type.
//
// A Candidate is an element's order-preserving selection key (complemented for smallest-first)
// with its position in the row, ordered so that `a.before(b)` means a is wanted earlier: a larger
// key, or the same key at a lower position (the CPU's tie rule). A List of K is kept sorted best
// first in K registers: every index below is a compile-time constant once the loops are unrolled,
// so the lists never go to local memory.
//   - insert: one candidate into a list (a shift network, no search);
//   - merge_best: the K best of two sorted lists. Element i of one list against element K-1-i of
//     the other keeps exactly the K best of both (the first p of one list and the first K-p of the
//     other, for some p), as a bitonic sequence; a bitonic half-cleaner network re-sorts it.
#ifndef KILN_CUDA_TOPK_LISTS_H
#define KILN_CUDA_TOPK_LISTS_H

// Unrolled on the device (register lists need constant indices); host compilers see plain
// inline functions and loops.
#ifdef __CUDACC_RTC__
#define KILN_TOPK_FUNCTION __device__ __forceinline__
#define KILN_TOPK_UNROLL _Pragma("unroll")
#else
#define KILN_TOPK_FUNCTION inline
#define KILN_TOPK_UNROLL
#endif

namespace kiln::cuda::topk_lists {

// Keys of up to 32 bits share one 64-bit word with the complement of the position: one integer
// comparison orders both. No default member initialisers: lists also live in __shared__ memory.
template <class U, bool Wide = (sizeof(U) == 8)>
struct Candidate {
  unsigned long long word;  // key << 32 | ~position

  KILN_TOPK_FUNCTION static Candidate none() { return {0}; }
  KILN_TOPK_FUNCTION static Candidate of(U key, unsigned position) {
    return {(static_cast<unsigned long long>(key) << 32) | static_cast<unsigned>(~position)};
  }
  KILN_TOPK_FUNCTION U key() const { return static_cast<U>(word >> 32); }
  KILN_TOPK_FUNCTION unsigned position() const { return ~static_cast<unsigned>(word); }
  KILN_TOPK_FUNCTION bool before(const Candidate& other) const { return word > other.word; }
};

// 64-bit keys: the key and the complemented position side by side.
template <class U>
struct Candidate<U, true> {
  unsigned long long key_bits;
  unsigned rank;  // ~position

  KILN_TOPK_FUNCTION static Candidate none() { return {0, 0}; }
  KILN_TOPK_FUNCTION static Candidate of(U key, unsigned position) {
    return {static_cast<unsigned long long>(key), ~position};
  }
  KILN_TOPK_FUNCTION U key() const { return static_cast<U>(key_bits); }
  KILN_TOPK_FUNCTION unsigned position() const { return ~rank; }
  KILN_TOPK_FUNCTION bool before(const Candidate& other) const {
    return key_bits > other.key_bits || (key_bits == other.key_bits && rank > other.rank);
  }
};
// none() comes after every real candidate: a real one has key >= 0 and ~position >= 2^31
// (positions are below 2^31), so rows shorter than K, or lanes that saw fewer than K elements,
// fill their lists with none() and the K best of a row of n >= k elements are all real.

// c into list (sorted best first), when c comes before list[K - 1]: each slot takes its left
// neighbour, c, or stays, by two comparisons against the old values.
template <int K, class C>
KILN_TOPK_FUNCTION void insert(C (&list)[K], const C& c) {
  KILN_TOPK_UNROLL
  for (int i = K - 1; i > 0; --i) {
    list[i] = c.before(list[i - 1]) ? list[i - 1] : (c.before(list[i]) ? c : list[i]);
  }
  if (c.before(list[0])) list[0] = c;
}

// Sorts a bitonic sequence best first (half-cleaners of strides K/2, K/4, ..., 1).
template <int K, class C>
KILN_TOPK_FUNCTION void sort_bitonic(C (&list)[K]) {
  static_assert((K & (K - 1)) == 0, "K must be a power of two");
  KILN_TOPK_UNROLL
  for (int stride = K / 2; stride > 0; stride /= 2) {
    KILN_TOPK_UNROLL
    for (int i = 0; i < K; ++i) {
      if ((i & stride) == 0) {
        const C a = list[i];
        const C b = list[i + stride];
        const bool swap = b.before(a);
        list[i] = swap ? b : a;
        list[i + stride] = swap ? a : b;
      }
    }
  }
}

// list becomes the K best of list and other (both sorted best first), sorted best first.
template <int K, class C>
KILN_TOPK_FUNCTION void merge_best(C (&list)[K], const C (&other)[K]) {
  KILN_TOPK_UNROLL
  for (int i = 0; i < K; ++i) {
    if (other[K - 1 - i].before(list[i])) list[i] = other[K - 1 - i];
  }
  sort_bitonic(list);
}

}  // namespace kiln::cuda::topk_lists

#endif  // KILN_CUDA_TOPK_LISTS_H
