// The elementwise driver: everything but the 1-D loop, compiled once for every op and dtype.
#include "backends/cpu/elementwise.h"

#include <algorithm>
#include <array>
#include <initializer_list>
#include <span>

#include "backends/cpu/loops.h"
#include "backends/cpu/parallel.h"
#include "kiln/detail/format.h"

namespace kiln::cpu {

namespace {

constexpr std::size_t kMaxElementwiseOperands = 3;  // the output and two inputs

// Elements per f32 tile of a 16-bit float operand: 1 KiB, so every tile of a run stays in L1.
constexpr std::int64_t kTile = 256;

// How an operand's storage reaches its kernel's element type.
enum class Storage : std::uint8_t { AsIs, F16, BF16 };

Storage storage_for(DType storage, DType kernel, const char* op) {
  if (storage == kernel) return Storage::AsIs;
  if (kernel == DType::F32 && storage == DType::F16) return Storage::F16;
  if (kernel == DType::F32 && storage == DType::BF16) return Storage::BF16;
  // Integers of one width share a kernel when the op does not depend on signedness.
  if (is_int(storage) && is_int(kernel) && dtype_size(storage) == dtype_size(kernel)) {
    return Storage::AsIs;
  }
  detail::fail<DTypeMismatch>(op, "no ", dtype_name(kernel), " kernel runs on ",
                              dtype_name(storage), " storage");
}

// Contiguous runs index a typed pointer, so that the conversions vectorise.
template <class Half>
void load_tile(const char* from, std::int64_t stride, std::int64_t n, float* to) noexcept {
  if (stride == sizeof(Half)) {
    const Half* in = reinterpret_cast<const Half*>(from);
    for (std::int64_t i = 0; i < n; ++i) to[i] = static_cast<float>(in[i]);
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      to[i] = static_cast<float>(*reinterpret_cast<const Half*>(from + i * stride));
    }
  }
}
template <class Half>
void store_tile(const float* from, std::int64_t n, char* to, std::int64_t stride) noexcept {
  if (stride == sizeof(Half)) {
    Half* out = reinterpret_cast<Half*>(to);
    for (std::int64_t i = 0; i < n; ++i) out[i] = Half(from[i]);
  } else {
    for (std::int64_t i = 0; i < n; ++i) *reinterpret_cast<Half*>(to + i * stride) = Half(from[i]);
  }
}
void load_tile(Storage storage, const char* from, std::int64_t stride, std::int64_t n,
               float* to) noexcept {
  if (storage == Storage::F16) {
    load_tile<half>(from, stride, n, to);
  } else {
    load_tile<bfloat16>(from, stride, n, to);
  }
}
void store_tile(Storage storage, const float* from, std::int64_t n, char* to,
                std::int64_t stride) noexcept {
  if (storage == Storage::F16) {
    store_tile<half>(from, n, to, stride);
  } else {
    store_tile<bfloat16>(from, n, to, stride);
  }
}

struct Operands {
  std::size_t count = 0;  // the output first, then the inputs
  std::array<char*, kMaxElementwiseOperands> base{};
  std::array<std::int64_t, kMaxElementwiseOperands> element_size{};
  std::array<Storage, kMaxElementwiseOperands> storage{};
  bool converts = false;  // some operand goes through f32 tiles
};

// The kernel on one run, through f32 tiles for the operands stored as 16-bit floats.
void run_segment(const Kernel& kernel, const Operands& operands, std::int64_t n, char* const* data,
                 const std::int64_t* strides) {
  if (!operands.converts) {
    kernel.loop(n, data, strides, kernel.context);
    return;
  }
  alignas(64) float tiles[kMaxElementwiseOperands][kTile];
  std::array<char*, kMaxElementwiseOperands> tile_data{};
  std::array<std::int64_t, kMaxElementwiseOperands> tile_strides{};
  for (std::int64_t start = 0; start < n; start += kTile) {
    const std::int64_t m = std::min(kTile, n - start);
    for (std::size_t k = 0; k < operands.count; ++k) {
      char* at = data[k] + start * strides[k];
      const Storage storage = operands.storage[k];
      if (storage == Storage::AsIs) {
        tile_data[k] = at;
        tile_strides[k] = strides[k];
        continue;
      }
      tile_data[k] = reinterpret_cast<char*>(tiles[k]);
      // A broadcast input is converted once and stays broadcast for the kernel.
      const bool broadcast = k > 0 && strides[k] == 0;
      tile_strides[k] = broadcast ? 0 : std::int64_t{sizeof(float)};
      if (k > 0) load_tile(storage, at, strides[k], broadcast ? 1 : m, tiles[k]);
    }
    kernel.loop(m, tile_data.data(), tile_strides.data(), kernel.context);
    if (operands.storage[0] != Storage::AsIs) {
      store_tile(operands.storage[0], tiles[0], m, data[0] + start * strides[0], strides[0]);
    }
  }
}

// Positions [begin, end) of plan (N operands) in runs along its innermost dim.
template <std::size_t N>
void walk(const Kernel& kernel, const Operands& operands, const LoopPlan& plan, std::int64_t begin,
          std::int64_t end) {
  walk_segments<N>(plan, begin, end,
                   [&](std::int64_t, std::int64_t n, const std::array<std::int64_t, N>& offsets,
                       const std::array<std::int64_t, N>& steps) {
                     std::array<char*, N> at;
                     std::array<std::int64_t, N> bytes;
                     for (std::size_t k = 0; k < N; ++k) {
                       at[k] = operands.base[k] + offsets[k] * operands.element_size[k];
                       bytes[k] = steps[k] * operands.element_size[k];
                     }
                     run_segment(kernel, operands, n, at.data(), bytes.data());
                   });
}

// Whether storage of this dtype reaches a kernel of type kernel as it is (storage_for's AsIs).
inline bool runs_as_is(DType storage, DType kernel) noexcept {
  return storage == kernel ||
         (is_int(storage) && is_int(kernel) && dtype_size(storage) == dtype_size(kernel));
}

// The common small op in straight-line code, for its per-call cost: every input of one shape,
// contiguous and read by the kernel as it is stored, too few elements to split over threads.
// The output, one kernel call on the whole run, no plan, tiles or heap beyond the output.
// Null when the op is not such a case.
std::shared_ptr<CpuTensor> run_small(std::span<const Primitive> inputs, const void* scalar,
                                     DType out_dtype, const Kernel& kernel) {
  const Shape& shape = inputs[0]->shape();
  const std::int64_t elements = shape.num_elements();
  // Below one grain parallel_for would run one thread (kernel.cost is small, so no overflow).
  if (elements >= kParallelGrain || elements * kernel.cost >= kParallelGrain) return nullptr;
  if (!runs_as_is(out_dtype, kernel.out)) return nullptr;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const Primitive& x = inputs[k];
    if (!runs_as_is(x->dtype(), kernel.in) || (k > 0 && x->shape() != shape) ||
        !as_cpu(x).is_contiguous()) {
      return nullptr;
    }
  }
  std::shared_ptr<CpuTensor> out;
  for (const Primitive& x : inputs) {
    // can_mut inline first: a shared input, the usual case, costs no call.
    if (can_mut(x) && reusable_as_output(x, shape, out_dtype)) {
      out = std::static_pointer_cast<CpuTensor>(x);
      break;
    }
  }
  if (!out) out = make_tensor(out_dtype, shape);
  if (elements == 0) return out;
  std::array<char*, kMaxElementwiseOperands> data{};
  std::array<std::int64_t, kMaxElementwiseOperands> steps{};
  data[0] = reinterpret_cast<char*>(out->data());
  steps[0] = static_cast<std::int64_t>(dtype_size(out_dtype));
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    data[k + 1] = reinterpret_cast<char*>(as_cpu(inputs[k]).data());
    steps[k + 1] = static_cast<std::int64_t>(dtype_size(inputs[k]->dtype()));
  }
  if (scalar) data[inputs.size() + 1] = const_cast<char*>(static_cast<const char*>(scalar));
  kernel.loop(elements, data.data(), steps.data(), kernel.context);
  return out;
}

// scalar, when not null, is one more input: a value of the kernel's input type, broadcast.
Primitive run(std::span<const Primitive> inputs, const void* scalar, DType out_dtype,
              const Kernel& kernel, const char* op) {
  bool same_shape = true;
  for (const Primitive& x : inputs) same_shape = same_shape && x->shape() == inputs[0]->shape();
  Shape broadcast;
  if (!same_shape) {
    broadcast = inputs[0]->shape();
    for (const Primitive& x : inputs.subspan(1)) {
      broadcast = broadcast_shapes(broadcast, x->shape(), op);
    }
  }
  const Shape& shape = same_shape ? inputs[0]->shape() : broadcast;

  Operands operands;
  operands.count = inputs.size() + 1 + (scalar ? 1 : 0);
  operands.storage[0] = storage_for(out_dtype, kernel.out, op);
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    operands.storage[k + 1] = storage_for(inputs[k]->dtype(), kernel.in, op);
  }
  std::shared_ptr<CpuTensor> out;
  for (const Primitive& x : inputs) {
    if (reusable_as_output(x, shape, out_dtype)) {
      out = std::static_pointer_cast<CpuTensor>(x);
      break;
    }
  }
  if (!out) out = make_tensor(out_dtype, shape);
  const std::int64_t elements = shape.num_elements();
  if (elements == 0) return out;

  bool contiguous = same_shape;
  operands.base[0] = reinterpret_cast<char*>(out->data());
  operands.element_size[0] = static_cast<std::int64_t>(dtype_size(out_dtype));
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const CpuTensor& x = as_cpu(inputs[k]);
    contiguous = contiguous && x.is_contiguous();
    operands.base[k + 1] = reinterpret_cast<char*>(x.data());
    operands.element_size[k + 1] = static_cast<std::int64_t>(dtype_size(x.dtype()));
  }
  const std::size_t scalar_slot = inputs.size() + 1;
  if (scalar) {
    operands.base[scalar_slot] = const_cast<char*>(static_cast<const char*>(scalar));
    operands.element_size[scalar_slot] = static_cast<std::int64_t>(dtype_size(kernel.in));
  }
  for (std::size_t k = 0; k < operands.count; ++k) {
    operands.converts = operands.converts || operands.storage[k] != Storage::AsIs;
  }

  const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / kernel.cost);
  if (contiguous) {
    // Same shapes, every operand row-major: one run, split over threads. No plan, so that an op
    // on a few elements costs little more than its kernel.
    std::array<std::int64_t, kMaxElementwiseOperands> steps{};
    for (std::size_t k = 0; k < operands.count; ++k) steps[k] = operands.element_size[k];
    if (scalar) steps[scalar_slot] = 0;
    parallel_for(elements, grain, [&](std::int64_t begin, std::int64_t end) {
      std::array<char*, kMaxElementwiseOperands> at{};
      for (std::size_t k = 0; k < operands.count; ++k) at[k] = operands.base[k] + begin * steps[k];
      run_segment(kernel, operands, end - begin, at.data(), steps.data());
    });
    return out;
  }
  std::array<Strides, kMaxElementwiseOperands - 1> strides;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    strides[k] = broadcast_strides(as_cpu(inputs[k]), shape);
  }
  if (scalar) strides[inputs.size()] = Strides(shape.rank(), 0);
  const LoopPlan plan = operands.count == 2
                            ? plan_loop(shape, {&out->strides(), &strides[0]})
                            : plan_loop(shape, {&out->strides(), &strides[0], &strides[1]});
  parallel_for(plan.elements, grain, [&](std::int64_t begin, std::int64_t end) {
    if (operands.count == 2) {
      walk<2>(kernel, operands, plan, begin, end);
    } else {
      walk<3>(kernel, operands, plan, begin, end);
    }
  });
  return out;
}

}  // namespace

std::int64_t elementwise_grain() noexcept { return kParallelGrain; }

// Each entry point tries the small path itself, so that a small op never enters run's frame.
Primitive run_unary(Primitive x, DType out_dtype, const Kernel& kernel, const char* op) {
  const std::array<Primitive, 1> inputs{std::move(x)};
  if (std::shared_ptr<CpuTensor> out = run_small(inputs, nullptr, out_dtype, kernel)) return out;
  return run(inputs, nullptr, out_dtype, kernel, op);
}

Primitive run_binary(Primitive lhs, Primitive rhs, DType out_dtype, const Kernel& kernel,
                     const char* op) {
  const std::array<Primitive, 2> inputs{std::move(lhs), std::move(rhs)};
  if (std::shared_ptr<CpuTensor> out = run_small(inputs, nullptr, out_dtype, kernel)) return out;
  return run(inputs, nullptr, out_dtype, kernel, op);
}

Primitive run_binary_scalar(Primitive x, const void* scalar, DType out_dtype, const Kernel& kernel,
                            const char* op) {
  const std::array<Primitive, 1> inputs{std::move(x)};
  if (std::shared_ptr<CpuTensor> out = run_small(inputs, scalar, out_dtype, kernel)) return out;
  return run(inputs, scalar, out_dtype, kernel, op);
}

}  // namespace kiln::cpu
