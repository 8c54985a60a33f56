// Creation, reads, device moves and casts. Reads are asynchronous: the copy into pinned
// staging is queued on the stream with an event, and the future waits on that event only when
// asked; deferred kernel failures surface there as ExecutionError naming the op.
#include <cstring>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_quant_tensor.h"
#include "backends/cuda/elementwise_ops.h"
#include "backends/cuda/host_trace.h"
#include "backends/cuda/index_kernels.h"
#include "backends/cuda/pinned.h"
#include "core/checked.h"
#include "runtime/registry.h"

namespace kiln::cuda {

namespace {

void check_storage(DType dtype, const char* op) {
  if (dtype == DType::QFloat) {
    detail::fail<UnsupportedDType>(op,
                                   "a qfloat tensor is made by quantize(scheme) or from "
                                   "quantized TensorData");
  }
}

// One queued device-to-host copy: where it lands and what it will be. A read dropped before
// it was waited for still waits for its copy before the staging buffer goes back to the pool
// (another read could otherwise get a buffer the DMA engine is still writing).
struct PendingRead {
  PinnedPool::Handle staging;
  std::shared_ptr<CUevent_st> copied;  // recorded after the copy was queued
  std::size_t bytes = 0;
  Shape shape;
  DType dtype = DType::F32;
  QuantScheme scheme;  // of QFloat blocks

  PendingRead() = default;
  PendingRead(PendingRead&&) noexcept = default;
  PendingRead& operator=(PendingRead&&) noexcept = default;
  ~PendingRead() {
    if (staging && copied) cuEventSynchronize(copied.get());
  }
};

PendingRead queue_read(CudaBackend& backend, const Primitive& x) {
  if (x->dtype() == DType::QFloat) {
    // The blocks byte for byte; a view whose blocks no longer run along its last dim decoded.
    const CudaQuantTensor& q = as_quantized(x);
    if (!q.in_stored_order()) return queue_read(backend, backend.dequantize(x, DType::F32));
    PendingRead read = queue_read(backend, block_bytes(q));
    read.shape = q.stored_shape();
    read.dtype = DType::QFloat;
    read.scheme = q.scheme();
    return read;
  }
  Runtime& rt = backend.runtime();
  TensorPtr c = backend.contiguous(x, "into_data");
  PendingRead read;
  read.shape = c->shape();
  read.dtype = c->dtype();
  read.bytes = static_cast<std::size_t>(c->shape().num_elements()) * dtype_size(c->dtype());
  rt.context.make_current();
  if (read.bytes > 0) {
    read.staging = PinnedPool::instance().acquire(read.bytes);
    KILN_CUDA_CHECK("into_data", cuMemcpyDtoHAsync(read.staging->data, c->data(), read.bytes,
                                                   rt.context.stream()));
  }
  return read;
}

// An event recorded after everything queued so far.
std::shared_ptr<CUevent_st> record_event(Runtime& rt, const char* op) {
  rt.context.make_current();
  CUevent event = nullptr;
  KILN_CUDA_CHECK(op, cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  std::shared_ptr<CUevent_st> owned(event, [](CUevent e) { cuEventDestroy(e); });
  KILN_CUDA_CHECK(op, cuEventRecord(event, rt.context.stream()));
  return owned;
}

void wait_event(Runtime& rt, CUevent event, const char* op) {
  rt.context.make_current();
  CUresult status;
  {
    HostTrace trace(op, "cuEventSynchronize");
    status = cuEventSynchronize(event);
  }
  if (status != CUDA_SUCCESS) {
    const char* text = nullptr;
    cuGetErrorString(status, &text);
    detail::fail<ExecutionError>(op, "a kernel on cuda:", rt.context.index(),
                                 " failed (ops in flight: ", rt.context.in_flight(),
                                 "): ", text ? text : "unknown error");
  }
  rt.context.throw_pending(op);
}

TensorData finish_read(PendingRead& read) {
  std::vector<std::byte> host(read.bytes);
  if (read.bytes > 0) std::memcpy(host.data(), read.staging->data, read.bytes);
  read.staging.reset();
  if (read.dtype == DType::QFloat) {
    return TensorData::quantized(std::move(host), std::move(read.shape), read.scheme);
  }
  return TensorData(std::move(host), std::move(read.shape), read.dtype);
}

}  // namespace

Primitive CudaBackend::from_data(TensorData data, Device) {
  if (data.dtype() != DType::QFloat) check_storage(data.dtype(), "from_data");
  if (runtime_.context.capturing_here()) {
    detail::fail<InvalidArgument>(
        "from_data",
        "cannot be captured on cuda: a CUDA graph would copy the host memory again at "
        "each replay, after it is gone; make the tensor before capture() (assign new "
        "values into it between replays)");
  }
  if (data.dtype() == DType::QFloat) return quantized_from_data(*this, data);
  TensorPtr out = make_tensor(data.dtype(), data.shape(), "from_data");
  const auto bytes = data.bytes();
  if (!bytes.empty()) {
    runtime_.context.make_current();
    // From pageable memory the driver stages the bytes before returning, so data may go.
    KILN_CUDA_CHECK("from_data", cuMemcpyHtoDAsync(out->data(), bytes.data(), bytes.size(),
                                                   runtime_.context.stream()));
  }
  return out;
}

Primitive CudaBackend::empty(Shape shape, DType dtype, Device) {
  check_storage(dtype, "empty");
  return make_tensor(dtype, shape, "empty");
}

Primitive CudaBackend::full(Shape shape, Scalar value, DType dtype, Device) {
  check_storage(dtype, "full");
  TensorPtr out = make_tensor(dtype, shape, "full");
  const DType raw = raw_dtype(dtype);
  ElementwiseOp spec{"full", "s0", {}, raw, raw, {raw}, nullptr};
  const std::uint64_t bits[] = {element_bits(value, dtype)};
  launch_elementwise(runtime_, spec, *out, {}, bits);
  return out;
}

Primitive CudaBackend::arange(std::int64_t start, std::int64_t end, std::int64_t step, DType dtype,
                              Device) {
  check_storage(dtype, "arange");
  const std::int64_t count = checked::arange_length(start, end, step, "arange");
  TensorPtr out = make_tensor(dtype, Shape{count}, "arange");
  const std::uint64_t bits[] = {scalar_bits_int(start), scalar_bits_int(step)};
  launch_elementwise(runtime_, arange_op(dtype), *out, {}, bits);
  return out;
}

Primitive CudaBackend::random(Shape shape, Distribution distribution, DType dtype, Device) {
  const std::optional<RandomStream> pinned = take_pinned_random();
  check_storage(dtype, "random");
  TensorPtr out = make_tensor(dtype, shape, "random");
  const auto n = static_cast<std::uint64_t>(shape.num_elements());
  // The CPU backend's formulas on the CPU backend's counter-based hash (index_kernels.h).
  const RandomStream at = pinned ? *pinned : *reserve_random(n);
  const std::uint64_t bits[] = {at.seed, at.first, scalar_bits(distribution.a, DType::F64),
                                scalar_bits(distribution.b, DType::F64)};
  launch_elementwise(runtime_, random_op(distribution.kind, dtype), *out, {}, bits);
  return out;
}

std::optional<RandomStream> CudaBackend::reserve_random(std::uint64_t count) {
  return RandomStream{seed_.load(), counter_.fetch_add(count)};
}

Primitive CudaBackend::cast(Primitive x, DType dtype) {
  if (x->dtype() == dtype) return x;
  check_storage(dtype, "cast");
  TensorPtr out = make_tensor(dtype, x->shape(), "cast");
  ElementwiseOp spec{"cast", "a", {x->dtype()}, x->dtype(), dtype, {}, nullptr};
  const CudaTensor* inputs[] = {&as_cuda(x)};
  launch_elementwise(runtime_, spec, *out, inputs);
  return out;
}

ReadFuture CudaBackend::into_data(Primitive x) {
  auto read = std::make_shared<PendingRead>(queue_read(*this, x));
  x.reset();
  auto event = record_event(runtime_, "into_data");
  read->copied = event;
  return std::async(std::launch::deferred, [this, read, event]() {
    wait_event(runtime_, event.get(), "into_data");
    return finish_read(*read);
  });
}

ReadManyFuture CudaBackend::read_many(PrimitiveList xs) {
  // Every copy queued first, then one event: one synchronisation for the whole transaction.
  auto reads = std::make_shared<std::vector<PendingRead>>();
  reads->reserve(xs.size());
  for (Primitive& x : xs) {
    reads->push_back(queue_read(*this, x));
    x.reset();
  }
  auto event = record_event(runtime_, "read_many");
  for (PendingRead& read : *reads) read.copied = event;
  return std::async(std::launch::deferred, [this, reads, event]() {
    wait_event(runtime_, event.get(), "read_many");
    std::vector<TensorData> out;
    out.reserve(reads->size());
    for (PendingRead& read : *reads) out.push_back(finish_read(read));
    return out;
  });
}

namespace {

// src (contiguous, on from's GPU) copied to a fresh tensor on to's GPU without the host: each
// stream waits for the other so neither the source nor the destination block is still in use by
// earlier work when the copy runs.
TensorPtr peer_copy(CudaBackend& from, const TensorPtr& src, CudaBackend& to) {
  TensorPtr dst = to.make_tensor(src->dtype(), src->shape(), "to_device");
  const std::size_t bytes =
      static_cast<std::size_t>(src->shape().num_elements()) * dtype_size(src->dtype());
  Runtime& here = from.runtime();
  Runtime& there = to.runtime();
  auto dst_ready = record_event(there, "to_device");
  here.context.make_current();
  KILN_CUDA_CHECK("to_device", cuStreamWaitEvent(here.context.stream(), dst_ready.get(), 0));
  if (bytes > 0) {
    KILN_CUDA_CHECK("to_device",
                    cuMemcpyPeerAsync(dst->data(), there.context.context(), src->data(),
                                      here.context.context(), bytes, here.context.stream()));
  }
  auto copied = record_event(here, "to_device");
  there.context.make_current();
  KILN_CUDA_CHECK("to_device", cuStreamWaitEvent(there.context.stream(), copied.get(), 0));
  here.context.make_current();
  return dst;
}

}  // namespace

Primitive CudaBackend::to_device(Primitive x, Device device) {
  if (x->device().same_hardware(device)) return x;
  if (device.kind() != DeviceKind::Cuda) return Backend::to_device(std::move(x), device);
  auto* other =
      dynamic_cast<CudaBackend*>(&hardware_backend_for(device.without_autodiff().without_fusion()));
  if (other == nullptr) return Backend::to_device(std::move(x), device);
  if (x->dtype() == DType::QFloat) {
    const CudaQuantTensor& q = as_quantized(x);
    // A view whose blocks no longer run along its last dim moves decoded, as it reads back.
    if (!q.in_stored_order()) return to_device(dequantize(std::move(x), DType::F32), device);
    TensorPtr blocks = peer_copy(*this, block_bytes(q), *other);
    return std::make_shared<CudaQuantTensor>(q.scheme(), q.stored_shape(),
                                             CudaQuantTensor::identity(q.stored_shape().rank()),
                                             other->device(), blocks->storage(), 0);
  }
  return peer_copy(*this, contiguous(x, "to_device"), *other);
}

}  // namespace kiln::cuda
