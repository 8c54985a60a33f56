// Backend: the op contract. One virtual method per op in ops.def, plus device-level methods.
// A Backend object serves one device. Ops take primitives by value and return new ones;
// defaults (ops.def availability DEFAULT) are composed of other ops and live in defaults/.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "contract/random_stream.h"
#include "kiln/data.h"
#include "kiln/device.h"
#include "kiln/distribution.h"
#include "kiln/options.h"
#include "kiln/primitive.h"
#include "kiln/process_group.h"
#include "kiln/scalar.h"

namespace kiln {

using ReadFuture = std::future<TensorData>;
using ReadManyFuture = std::future<std::vector<TensorData>>;
using PrimitivePair = std::pair<Primitive, Primitive>;
using OptionalPrimitive = std::optional<Primitive>;
using PrimitiveList = std::vector<Primitive>;
using ResolvedSlices = std::vector<ResolvedSlice>;
using Axes = std::vector<std::int64_t>;

struct FusedProgram;  // contract/fused_program.h

// Work a device recorded between begin_device_capture and end_device_capture, run again as one
// unit (the CUDA backend: a CUDA graph). Launching queues one run after everything queued before.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  virtual void launch() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // ---- device-level methods ----
  // The chain of backends, e.g. "cpu", "autodiff<cpu>".
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  virtual DeviceSettings default_settings() const { return {}; }
  virtual DTypeUsageSet dtype_usage(DType dtype) const = 0;
  bool supports_dtype(DType dtype) const {
    const DTypeUsageSet usage = dtype_usage(dtype);
    return usage.contains(DTypeUsage::Storage) && usage.contains(DTypeUsage::Arithmetic);
  }
  virtual void seed(std::uint64_t seed) = 0;
  // Reserves the next count values of this device's random stream, as a random op of count
  // values called now would take them, and says where they are (contract/random_stream.h): a
  // random op run later under DrawRandomAt(place) draws exactly those. Null when this backend's
  // random cannot draw at a reserved place; the fusion decorator then runs random at once.
  virtual std::optional<RandomStream> reserve_random(std::uint64_t /*count*/) {
    return std::nullopt;
  }
  // Blocks until all queued work is done; deferred failures surface here as ExecutionError.
  virtual void sync() {}
  // Submits queued work without waiting.
  virtual void flush() {}
  virtual MemoryStats memory_stats() const { return {}; }
  virtual void memory_cleanup() {}
  virtual void reset_peak_memory() {}
  // Whether this backend records gradients (the autodiff decorator says yes).
  virtual bool autodiff_enabled() const { return false; }
  // The bytes of a tensor this backend made with empty(), where they are host memory the caller
  // may write in place (the CPU): a server receives an upload straight into the tensor instead of
  // a buffer copied in afterwards. Empty where they are not (device memory, a decorator's
  // wrapped value), and the caller then goes through from_data.
  virtual std::span<std::byte> host_bytes(const Primitive& /*fresh*/) { return {}; }
  // Runs a group of ops the fusion decorator recorded and returns the values program.outputs
  // names (contract/fused_program.h). The default runs the steps one by one (run_steps); a
  // backend overrides it to run the group as one kernel.
  virtual std::vector<Primitive> run_fused(const FusedProgram& program);
  // The fusion decorator runs an op over fewer elements than this at once, unrecorded (when its
  // inputs are computed): where run_fused would run so small a group step by step anyway,
  // recording only adds the record's cost. 4096 by default (the CPU's tiles); a backend whose
  // run_fused saves launches at any size says 1.
  virtual std::int64_t min_fused_elements() const { return 4096; }
  // Whether run_fused runs elementwise steps over a reduction's result (of the reduced shape)
  // inside the reduction's kernels: the fusion decorator then groups a reduction with the ops
  // after it (an optimizer's update after a bias's gradient is summed), which otherwise form a
  // group of their own. False by default (the CPU: the group would run step by step).
  virtual bool fuses_reduction_epilogues() const { return false; }

  // ---- in-place writes and capture (kiln/graph.h) ----
  // Writes src's values into dst's storage, so every handle sharing that storage sees them (the
  // first in-place op of the contract: Tensor::assign, optimizer updates under a capture). dst
  // and src are this backend's, of one shape and dtype (the tensor layer checked). The base
  // throws UnsupportedOperation.
  virtual void assign(const Primitive& dst, Primitive src);
  // The device's own recording of the work queued between the two calls (the CUDA backend: a
  // stream capture). end_device_capture returns it, or discards it when keep is false (the region
  // threw); null when the device has no recording of its own, and a replay then runs the ops
  // recorded above it (the CPU).
  virtual void begin_device_capture() {}
  // Whether begin_device_capture starts such a recording (the region's ops then run after it).
  virtual bool records_device_graph() const { return false; }
  virtual std::unique_ptr<DeviceGraph> end_device_capture(bool /*keep*/) { return nullptr; }

  // ---- ops ----
#define KILN_OP_BODY_REQUIRED = 0;
#define KILN_OP_BODY_DEFAULT ;
#define KILN_OP_BODY_LATER ;
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  virtual result name params KILN_OP_BODY_##availability
#include "kiln/detail/ops.def"
#undef KILN_OP
#undef KILN_OP_BODY_REQUIRED
#undef KILN_OP_BODY_DEFAULT
#undef KILN_OP_BODY_LATER
};

}  // namespace kiln
