// Joining and splitting: cat, stack, repeat, repeat_dim, chunk, split, split_sizes.
#include <algorithm>
#include <exception>

#include "core/buffer.h"
#include "core/checked.h"
#include "tensor/common.h"

namespace kiln::detail {

namespace {

// Checks a list of tensors to join (non-empty, one kind, one device, one rank) and brings them
// to one dtype (the widest of their kind). Returns the backend that runs the join: a tracked
// operand makes it tracked.
Backend& prepare_join(Prims& xs, const char* op) {
  if (xs.empty()) fail<InvalidArgument>(op, "cannot join an empty list of tensors");
  for (Primitive& x : xs) check_any_kind(x, op);
  const Primitive& first = xs.front();
  Device chosen = first->device();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Primitive& x = xs[i];
    if (kind_of(x->dtype()) != kind_of(first->dtype())) {
      fail<DTypeMismatch>(op, "tensor ", i, " has dtype ", dtype_name(x->dtype()),
                          " but tensor 0 has dtype ", dtype_name(first->dtype()),
                          "; they must be of one kind");
    }
    backend_of(first, x, op);
    chosen = joined(chosen, x->device());
    if (x->rank() != first->rank()) {
      fail<ShapeMismatch>(op, "tensor ", i, " has shape ", x->shape().to_string(),
                          " but tensor 0 has shape ", first->shape().to_string(),
                          "; they must have the same rank");
    }
  }
  // Two passes: the first leaves xs[0] at the widest dtype, the second brings the rest to it.
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t i = 1; i < xs.size(); ++i) promote(xs[0], xs[i], op);
  }
  return backend_for(chosen);
}

// Dim d of x repeated `times` times; a product past int64 is as unallocatable as one past the
// element limit (OutOfMemory, as dense_bytes says for the rest).
std::int64_t repeated_size(const Primitive& x, std::size_t d, std::int64_t times, const char* op) {
  std::int64_t out = 0;
  if (__builtin_mul_overflow(x->shape()[d], times, &out)) {
    fail<OutOfMemory>(op, "repeating dim ", d, " of ", x->shape().to_string(), " ", times,
                      " times is too large");
  }
  return out;
}

std::int64_t dim_size(const Primitive& x, std::int64_t dim) {
  return x->shape()[static_cast<std::size_t>(dim)];
}

}  // namespace

Primitive cat(Prims xs, std::int64_t dim) {
  const char* op = "cat";
  Backend& backend = prepare_join(xs, op);
  const Shape& first = xs.front()->shape();
  dim = normalize_dim(dim, first.rank(), op);
  Shape joined = first;
  for (std::size_t i = 1; i < xs.size(); ++i) {
    const Shape& shape = xs[i]->shape();
    joined[static_cast<std::size_t>(dim)] =
        checked::add(joined[static_cast<std::size_t>(dim)], shape[static_cast<std::size_t>(dim)],
                     op, "the joined dim");
    for (std::size_t d = 0; d < shape.rank(); ++d) {
      if (static_cast<std::int64_t>(d) != dim && shape[d] != first[d]) {
        fail<ShapeMismatch>(op, "tensor ", i, " has shape ", shape.to_string(),
                            " but tensor 0 has shape ", first.to_string(),
                            "; they must match in every dim but ", dim);
      }
    }
  }
  checked::check_shape(joined, op);
  if (xs.size() == 1) return xs.front();
  return backend.cat(std::move(xs), dim);
}

Primitive stack(Prims xs, std::int64_t dim) {
  const char* op = "stack";
  Backend& backend = prepare_join(xs, op);
  const Shape first = xs.front()->shape();
  dim = normalize_dim(dim, first.rank() + 1, op);
  DimVector dims(first.vector());
  dims.insert(static_cast<std::size_t>(dim), 1);
  const Shape unsqueezed(std::move(dims));
  Shape stacked = unsqueezed;
  stacked[static_cast<std::size_t>(dim)] = static_cast<std::int64_t>(xs.size());
  checked::check_shape(stacked, op);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (xs[i]->shape() != first) {
      fail<ShapeMismatch>(op, "tensor ", i, " has shape ", xs[i]->shape().to_string(),
                          " but tensor 0 has shape ", first.to_string(),
                          "; stacked tensors must have one shape");
    }
    xs[i] = backend_of(xs[i]).reshape(std::move(xs[i]), unsqueezed);
  }
  if (xs.size() == 1) return xs.front();
  return backend.cat(std::move(xs), dim);
}

Primitive repeat_dim(Primitive x, std::int64_t dim, std::int64_t times) {
  const char* op = "repeat_dim";
  check_any_kind(x, op);
  dim = normalize_dim(dim, x->rank(), op);
  if (times < 0) fail<InvalidArgument>(op, "cannot repeat a negative number of times: ", times);
  if (times == 1) return x;
  Shape repeated = x->shape();
  repeated[static_cast<std::size_t>(dim)] =
      repeated_size(x, static_cast<std::size_t>(dim), times, op);
  (void)checked::dense_bytes(repeated, x->dtype(), op);
  return backend_of(x).repeat_dim(std::move(x), dim, times);
}

Primitive repeat(Primitive x, std::vector<std::int64_t> times) {
  const char* op = "repeat";
  check_any_kind(x, op);
  if (times.size() != x->rank()) {
    fail<InvalidArgument>(op, times.size(), " repeat counts given for rank ", x->rank());
  }
  for (std::int64_t t : times) {
    if (t < 0) fail<InvalidArgument>(op, "cannot repeat a negative number of times: ", t);
  }
  // The whole result checked up front, not one repeated dim at a time.
  Shape repeated = x->shape();
  for (std::size_t d = 0; d < times.size(); ++d) repeated[d] = repeated_size(x, d, times[d], op);
  (void)checked::dense_bytes(repeated, x->dtype(), op);
  for (std::size_t d = 0; d < times.size(); ++d) {
    if (times[d] != 1) {
      x = backend_of(x).repeat_dim(std::move(x), static_cast<std::int64_t>(d), times[d]);
    }
  }
  return x;
}

Prims split_sizes(Primitive x, std::vector<std::int64_t> sizes, std::int64_t dim) {
  const char* op = "split_sizes";
  check_any_kind(x, op);
  dim = normalize_dim(dim, x->rank(), op);
  const std::int64_t n = dim_size(x, dim);
  std::int64_t total = 0;
  for (std::int64_t s : sizes) {
    if (s < 0) fail<InvalidArgument>(op, "negative split size ", s);
    total = checked::add(total, s, op, "the sum of the split sizes");
  }
  if (total != n) {
    fail<InvalidArgument>(op, "split sizes add up to ", total, " but dim ", dim, " of ",
                          x->shape().to_string(), " has size ", n);
  }
  Prims out;
  out.reserve(sizes.size());
  std::int64_t start = 0;
  for (std::int64_t s : sizes) {
    out.push_back(narrow(x, dim, start, s));
    start += s;
  }
  return out;
}

Prims split(Primitive x, std::int64_t split_size, std::int64_t dim) {
  const char* op = "split";
  dim = normalize_dim(dim, x->rank(), op);
  const std::int64_t n = dim_size(x, dim);
  if (n == 0) return {x};
  if (split_size <= 0) fail<InvalidArgument>(op, "split size must be positive, got ", split_size);
  // One view per part: as many parts as a dim of 2^48 elements may have is more than memory
  // holds, an OutOfMemory like any other allocation.
  const std::int64_t parts = n / split_size + (n % split_size != 0 ? 1 : 0);
  const auto fail_parts = [&] {
    fail<OutOfMemory>(op, "splitting dim ", dim, " of ", x->shape().to_string(), " into ", parts,
                      " parts of ", split_size, " needs more memory than there is");
  };
  if (static_cast<std::uint64_t>(parts) > kMaxHostAllocationBytes / sizeof(Primitive)) fail_parts();
  std::vector<std::int64_t> sizes;
  try {
    sizes.reserve(static_cast<std::size_t>(parts));
  } catch (const std::exception&) {  // bad_alloc or length_error: all reserve throws
    fail_parts();
  }
  // Stepped as n - start > split_size: start + split_size may not fit in int64.
  for (std::int64_t start = 0; start < n;) {
    const std::int64_t size = std::min(split_size, n - start);
    sizes.push_back(size);
    start += size;
  }
  return split_sizes(std::move(x), std::move(sizes), dim);
}

Prims chunk(Primitive x, std::int64_t chunks, std::int64_t dim) {
  const char* op = "chunk";
  if (chunks <= 0) fail<InvalidArgument>(op, "the number of chunks must be positive, got ", chunks);
  dim = normalize_dim(dim, x->rank(), op);
  // PyTorch's rule: chunks of ceil(n / chunks), so there may be fewer than asked for.
  const std::int64_t n = dim_size(x, dim);
  return split(std::move(x), n / chunks + (n % chunks != 0 ? 1 : 0), dim);
}

}  // namespace kiln::detail
