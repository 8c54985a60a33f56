// libFuzzer target: random sequences of shape and view ops with extreme arguments.
//
// Each input is a little program: bytes choose an op, the tensors it works on and its integer
// arguments, drawn with a bias towards the values that break size arithmetic (0, 1, -1, 2^31,
// 2^32, 2^62, INT64_MIN, INT64_MAX, a dim's size plus or minus one). Every op must either throw
// a kiln::Error or return a tensor whose every element can be read; any other exception, a
// sanitizer report or a crash is a finding.
//
// Two checks go beyond "it did not crash":
// - Pool tensors start as distinct values 1..n; views and copies of them (narrow, slice,
//   permute, cat, ...) may only hold such values. A view that reaches past its storage but stays
//   inside the allocator's rounded-up block is invisible to AddressSanitizer, but reads a value
//   outside that set (or one of another tensor).
// - Tensors too large to read whole (a 2^40-element expand) are read at their corners, which
//   are the lowest and highest addresses a strided view reaches.
#include <kiln/kiln.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

namespace {

using kiln::Primitive;
namespace detail = kiln::detail;

constexpr std::int64_t kMaxBaseValue = 1 << 12;
// Ops that visit every element run only on tensors this small, so each input stays fast.
constexpr std::int64_t kComputeLimit = 1 << 14;
constexpr std::int64_t kReadLimit = 1 << 12;

class Program {
 public:
  Program(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  bool done() const { return position_ >= size_; }
  std::uint8_t byte() { return position_ < size_ ? data_[position_++] : 0; }

  // An integer argument: mostly small, often extreme, sometimes relative to `near` (a dim size).
  std::int64_t integer(std::int64_t near = 4) {
    static constexpr std::int64_t kExtremes[] = {
        0,
        1,
        -1,
        2,
        std::int64_t{1} << 31,
        std::int64_t{1} << 32,
        (std::int64_t{1} << 32) + 1,
        std::int64_t{1} << 48,
        std::int64_t{1} << 62,
        -(std::int64_t{1} << 62),
        std::numeric_limits<std::int64_t>::max(),
        std::numeric_limits<std::int64_t>::min(),
        std::numeric_limits<std::int64_t>::max() - 1,
        std::numeric_limits<std::int64_t>::min() + 1,
        std::numeric_limits<std::int32_t>::max(),
        -(std::int64_t{1} << 31),
    };
    const std::uint8_t kind = byte();
    switch (kind % 8) {
      case 0:
      case 1:
      case 2:
        return kind / 8 % 6;  // 0..5
      case 3:
        return -static_cast<std::int64_t>(kind / 8 % 5) - 1;
      case 4:
        return kExtremes[kind / 8 % std::size(kExtremes)];
      case 5:
        return near + static_cast<std::int64_t>(kind / 8 % 3) - 1;
      case 6:
        return -near;
      default:
        return static_cast<std::int64_t>(byte()) - 64;
    }
  }

  std::vector<std::int64_t> dims(std::size_t max_rank) {
    const std::size_t rank = 1 + byte() % max_rank;
    std::vector<std::int64_t> out(rank);
    for (auto& d : out) d = integer();
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t position_ = 0;
};

struct Slot {
  Primitive tensor;
  bool pure = false;  // holds only values of the base tensors (1..kMaxBaseValue)
};

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "shape_ops_fuzz: %s\n", what);
  std::abort();
}

std::int64_t checked_count(const kiln::Shape& shape) {
  __int128 count = 1;
  for (std::int64_t d : shape.dims()) {
    if (d < 0) finding("a tensor has a negative dim");
    count *= d;
    if (count > (std::int64_t{1} << 48)) finding("a tensor has more than 2^48 elements");
  }
  return static_cast<std::int64_t>(count);
}

void check_values(const kiln::TensorData& data, std::int64_t expected, bool pure) {
  if (data.num_elements() != expected || data.shape().num_elements() != expected) {
    finding("read data has the wrong element count");
  }
  if (!pure) return;
  for (double v : data.to_f64_vec()) {
    if (!(v >= 1 && v <= kMaxBaseValue) || v != static_cast<double>(static_cast<std::int64_t>(v))) {
      finding("a view read a value that is not in its base tensor");
    }
  }
}

// Reads the whole tensor when small, else every corner (2^rank one-element narrows).
void check_readable(const Slot& slot) {
  const Primitive& t = slot.tensor;
  const std::int64_t count = checked_count(t->shape());
  if (count <= kReadLimit) {
    check_values(detail::into_data(t), count, slot.pure);
    return;
  }
  // One slice per corner (a [1, 1, ...] window); all 2^rank corners up to rank 4, which covers
  // the lowest and highest address whatever the signs of the strides, and 16 spread over them
  // beyond.
  const std::size_t rank = t->rank();
  const std::uint32_t corners = 1u << rank;
  const std::uint32_t stride = corners <= 16 ? 1 : corners / 16 + 1;
  for (std::uint32_t corner = 0; corner < corners; corner += stride) {
    std::vector<kiln::Slice> window(rank);
    for (std::size_t d = 0; d < rank; ++d) {
      const std::int64_t at = (corner >> d) & 1 ? t->shape()[d] - 1 : 0;
      window[d] = kiln::Slice(at, at + 1);
    }
    check_values(detail::into_data(detail::slice(t, window)), 1, slot.pure);
  }
  // The all-last corner, which a stride above 1 may step over.
  std::vector<kiln::Slice> last(rank);
  for (std::size_t d = 0; d < rank; ++d) last[d] = kiln::Slice(t->shape()[d] - 1, t->shape()[d]);
  check_values(detail::into_data(detail::slice(t, last)), 1, slot.pure);
}

Primitive base_tensor(Program& p) {
  const kiln::DType dtypes[] = {kiln::DType::F32, kiln::DType::F64, kiln::DType::I64,
                                kiln::DType::I32, kiln::DType::BF16};
  const kiln::DType dtype = dtypes[p.byte() % std::size(dtypes)];
  std::int64_t n = p.byte() % 25;  // 0..24 elements, values 1..n
  Primitive t = detail::arange(1, n + 1, 1, kiln::DType::I64, kiln::Device::cpu(), kiln::Kind::Int);
  t = detail::cast(std::move(t), dtype);
  // A shape for the n elements: up to three factors.
  std::vector<std::int64_t> dims;
  std::int64_t rest = n;
  for (int i = 0; i < 2 && rest > 1; ++i) {
    const std::int64_t f = 1 + p.byte() % 4;
    if (rest % f == 0) {
      dims.push_back(f);
      rest /= f;
    }
  }
  dims.push_back(rest);
  return detail::reshape(std::move(t), kiln::Shape(dims), dims.size());
}

std::int64_t dim_of(Program& p, const Primitive& t) {
  // Mostly a valid dim (possibly negative), sometimes anything.
  const std::uint8_t b = p.byte();
  const auto rank = static_cast<std::int64_t>(t->rank());
  if (b % 4 == 3) return p.integer(rank);
  return static_cast<std::int64_t>(b / 4 % (2 * rank + 1)) - rank;
}

std::vector<kiln::Slice> slices_of(Program& p, const Primitive& t) {
  // Rank 0 is reachable through the untyped layer (squeezing a [1]): no slices then.
  std::vector<kiln::Slice> out(t->rank() == 0 ? 0 : 1 + p.byte() % t->rank());
  for (std::size_t d = 0; d < out.size(); ++d) {
    const std::int64_t size = t->shape()[d];
    out[d].start = p.integer(size);
    if (p.byte() % 3 != 0) out[d].end = p.integer(size);
    out[d].step = p.integer(1);
  }
  return out;
}

bool small(const Primitive& t, std::int64_t limit = kComputeLimit) {
  return checked_count(t->shape()) <= limit;
}

// Whether an op that allocates `count` elements may run: small results, and results past kiln's
// limits (which it must refuse before allocating). Legal but large ones are skipped: filling
// gigabytes proves nothing and would exhaust the machine.
bool may_allocate(__int128 count) { return count <= kComputeLimit || count > (__int128{1} << 48); }
__int128 wide_count(const std::vector<std::int64_t>& dims) {
  __int128 nonzero = 1;
  bool zero = false;
  for (std::int64_t d : dims) {
    if (d < 0) return -1;  // refused whatever the rest
    if (d == 0) {
      zero = true;
      continue;
    }
    nonzero = std::min<__int128>(nonzero * d, __int128{1} << 64);
  }
  return zero && nonzero <= (__int128{1} << 48) ? 0 : nonzero;
}

// Runs one op on the pool; returns the new tensor and whether it holds only base values.
Slot step(Program& p, std::vector<Slot>& pool) {
  Slot& a = pool[p.byte() % pool.size()];
  const Slot& b = pool[p.byte() % pool.size()];
  const Primitive& x = a.tensor;
  const std::uint8_t op = p.byte();
  // KILN_FUZZ_TRACE=1 names each op and its operand's shape (to reduce a finding by hand).
  static const bool trace = std::getenv("KILN_FUZZ_TRACE") != nullptr;
  if (trace) std::fprintf(stderr, "op %d on %s\n", op % 28, x->shape().to_string().c_str());
  switch (op % 28) {
    case 0: {
      std::vector<std::int64_t> dims = p.dims(4);
      return {detail::reshape(x, kiln::Shape(dims), dims.size()), a.pure};
    }
    case 1: {
      const std::int64_t dim = dim_of(p, x);
      const std::int64_t start = p.integer(x->shape()[0]);
      return {detail::narrow(x, dim, start, p.integer(2)), a.pure};
    }
    case 2:
      return {detail::slice(x, slices_of(p, x)), a.pure};
    case 3: {
      std::vector<std::int64_t> dims = p.dims(5);
      // Often the input's own dims with one changed, so the expand is legal.
      if (p.byte() % 2 && dims.size() >= x->rank()) {
        const std::size_t lead = dims.size() - x->rank();
        for (std::size_t d = 0; d < x->rank(); ++d) {
          if (x->shape()[d] != 1) dims[lead + d] = x->shape()[d];
        }
      }
      return {detail::expand(x, kiln::Shape(dims)), a.pure};
    }
    case 4: {
      std::vector<std::int64_t> axes(x->rank());
      for (auto& axis : axes) axis = dim_of(p, x);
      return {detail::permute(x, axes), a.pure};
    }
    case 5:
      return {detail::flip(x, {dim_of(p, x)}), a.pure};
    case 6:
      return {detail::unsqueeze(x, dim_of(p, x)), a.pure};
    case 7:
      return {detail::squeeze(x, dim_of(p, x)), a.pure};
    case 8:
      return {detail::flatten(x, dim_of(p, x), dim_of(p, x)), a.pure};
    case 9: {
      const std::int64_t dim = dim_of(p, x);
      return {detail::unfold(x, dim, p.integer(2), p.integer(1)), a.pure};
    }
    case 10: {
      detail::Prims xs{x, b.tensor};
      for (int extra = p.byte() % 3; extra > 0; --extra) xs.push_back(x);
      __int128 total = 0;
      for (const Primitive& t : xs) total += checked_count(t->shape());
      if (!may_allocate(total)) return {x, a.pure};
      return {detail::cat(xs, dim_of(p, x)), a.pure && b.pure};
    }
    case 11: {
      if (!may_allocate(__int128{2} * checked_count(x->shape()))) return {x, a.pure};
      return {detail::stack({x, b.tensor}, dim_of(p, x)), a.pure && b.pure};
    }
    case 12: {
      const std::int64_t dim = dim_of(p, x), times = p.integer(2);
      if (!may_allocate(__int128{checked_count(x->shape())} * times)) return {x, a.pure};
      return {detail::repeat_dim(x, dim, times), a.pure};
    }
    case 13: {
      const bool chunk = p.byte() % 2;
      const std::int64_t count = p.integer(2), dim = dim_of(p, x);
      // Splitting a dim of 2^40 into parts of one makes 2^40 views, even of an empty tensor:
      // legal, and as unaffordable as any other huge allocation (skipped, like those).
      const auto rank = static_cast<std::int64_t>(x->rank());
      const bool valid = dim >= -rank && dim < rank;  // else split refuses it
      const __int128 length =
          valid ? x->shape()[static_cast<std::size_t>(dim < 0 ? dim + rank : dim)] : 0;
      const __int128 part_count =
          chunk ? std::min<__int128>(count, length) : (count > 0 ? length / count : 0);
      if (!may_allocate(part_count)) return {x, a.pure};
      detail::Prims parts = chunk ? detail::chunk(x, count, dim) : detail::split(x, count, dim);
      if (parts.empty()) return {x, a.pure};
      return {parts[p.byte() % parts.size()], a.pure};
    }
    case 14: {
      const std::int64_t start = p.integer(), end = p.integer(8), by = p.integer(1);
      const __int128 span = __int128{end} - start;
      if (by != 0 && !may_allocate(span / by)) return {x, a.pure};
      return {
          detail::arange(start, end, by, kiln::DType::I64, kiln::Device::cpu(), kiln::Kind::Int),
          false};
    }
    case 15: {
      if (!small(x)) return {x, a.pure};
      switch (p.byte() % 8) {
        case 0:
          return {detail::sum(x), false};
        case 1:
          return {detail::sum_dim(x, dim_of(p, x)), false};
        case 2:
          return {detail::max_dim(x, dim_of(p, x)), a.pure};
        case 3:
          return {detail::argmax(x, dim_of(p, x)), false};
        case 4:
          return {detail::cumsum(x, dim_of(p, x)), false};
        case 5:
          return {detail::prod_dim(x, dim_of(p, x)), false};
        case 6:
          return {detail::min(x), a.pure};
        default:
          return {detail::any_dim(x, dim_of(p, x)), false};
      }
    }
    case 16: {
      // In place: the moved handle is the storage's only owner when the pool holds no other
      // view of it, and the CPU backend then writes into the view's own memory.
      if (!small(x)) return {x, a.pure};
      Primitive moved = std::move(a.tensor);
      a.tensor =
          detail::full(kiln::Shape{1}, 1, kiln::DType::F32, kiln::Device::cpu(), kiln::Kind::Float);
      a.pure = true;
      return {detail::add_scalar(std::move(moved), 1), false};
    }
    case 17: {
      if (!small(x) || !small(b.tensor)) return {x, a.pure};
      return {detail::add(x, b.tensor), false};
    }
    case 18:
      (void)detail::into_scalar(x);
      return {x, a.pure};
    case 19: {
      if (!small(x)) return {x, a.pure};
      return {detail::mul_scalar(x, 1), a.pure};  // a contiguous copy of any view
    }
    case 20: {
      if (!small(x)) return {x, a.pure};
      return {detail::slice_fill(x, slices_of(p, x), 7), a.pure};
    }
    case 21:
      return {detail::swap_dims(x, dim_of(p, x), dim_of(p, x)), a.pure};
    case 22: {
      std::vector<std::int64_t> sizes(p.byte() % 4);
      for (auto& s : sizes) s = p.integer(1);
      detail::Prims parts = detail::split_sizes(x, sizes, dim_of(p, x));
      if (parts.empty()) return {x, a.pure};
      return {parts[p.byte() % parts.size()], a.pure};
    }
    case 23: {
      std::vector<std::int64_t> dims = p.dims(4);
      if (!may_allocate(wide_count(dims))) return {x, a.pure};
      return {detail::full(kiln::Shape(dims), 3, kiln::DType::F32, kiln::Device::cpu(),
                           kiln::Kind::Float),
              true};
    }
    case 24: {
      // Spatial ops with extreme output sizes on a small 4-D image.
      if (x->rank() != 4 || !small(x)) return {x, a.pure};
      Primitive image = detail::cast(x, kiln::DType::F32);
      std::vector<std::int64_t> size{p.integer(2), p.integer(2)};
      if (!may_allocate(wide_count({x->shape()[0], x->shape()[1], size[0], size[1]}))) {
        return {x, a.pure};
      }
      if (p.byte() % 2) return {detail::interpolate(image, size, {}), false};
      return {detail::adaptive_avg_pool(image, size), false};
    }
    case 25: {
      std::vector<std::int64_t> times(x->rank());
      for (auto& t : times) t = p.integer(1);
      std::vector<std::int64_t> result(times);
      for (std::size_t d = 0; d < times.size(); ++d) {
        const __int128 r = __int128{times[d]} * x->shape()[d];
        result[d] =
            r > (__int128{1} << 62) ? (std::int64_t{1} << 62) : static_cast<std::int64_t>(r);
      }
      if (!may_allocate(wide_count(result))) return {x, a.pure};
      return {detail::repeat(x, times), a.pure};
    }
    case 26: {
      if (!small(x)) return {x, a.pure};
      auto [values, indices] = detail::topk_with_indices(x, p.integer(1), dim_of(p, x), true);
      return {values, a.pure};
    }
    default: {
      if (!small(x) || !small(b.tensor)) return {x, a.pure};
      // Slice assignment of b (cast and expanded by the op's own rules) into a view of x.
      return {detail::slice_assign(x, slices_of(p, x), b.tensor), false};
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Ops may legally materialise a view of up to 2^48 elements; the cap turns that into an
  // OutOfMemory instead of exhausting the machine.
  setenv("KILN_CPU_MEMORY_LIMIT", "67108864", 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Program program(data, size);
  std::vector<Slot> pool;
  try {
    for (int i = 0; i < 3; ++i) pool.push_back({base_tensor(program), true});
  } catch (const kiln::Error&) {
    return 0;
  }
  for (int steps = 0; steps < 24 && !program.done(); ++steps) {
    try {
      Slot result = step(program, pool);
      check_readable(result);
      const std::size_t target = program.byte() % (pool.size() + 1);
      if (target == pool.size() && pool.size() < 6) {
        pool.push_back(std::move(result));
      } else {
        pool[target % pool.size()] = std::move(result);
      }

    } catch (const kiln::Error&) {
      // The op refused its arguments: the expected outcome for most extreme values.
    } catch (const std::exception& e) {
      std::fprintf(stderr, "shape_ops_fuzz: a non-kiln exception escaped: %s\n", e.what());
      std::abort();
    }
  }
  // In-place ops may have written into storage other slots view: every slot is read once more.
  for (const Slot& slot : pool) {
    try {
      check_readable(slot);
    } catch (const kiln::Error&) {
    }
  }
  // The caching allocator keeps freed blocks for reuse; over millions of inputs of every size
  // they would add up to libFuzzer's RSS limit.
  pool.clear();
  kiln::Device::cpu().memory_cleanup();
  return 0;
}
