// A `remote://host:port` device: every op of ops.def is sent to `kiln serve`, which runs it on
// its own device. Results are RemoteTensors that name a value the server holds; their dtype and
// shape come from remote::infer_types, so an op returns at once and the next op is queued
// behind it (one frame per batch, not a round trip per op). Reads, syncs and memory stats wait
// for the server's reply; a failure on the server surfaces there, as the same kiln::Error type,
// naming the op. Autodiff and fusion wrap this backend like any other.
#pragma once

#include <memory>
#include <string>

#include "contract/backend.h"
#include "kiln/detail/op_columns.h"
#include "remote/background_release.h"
#include "remote/channel.h"

namespace kiln::remote {

class RemoteTensor final : public TensorPrimitive {
 public:
  RemoteTensor(const ir::TensorType& type, Device device, Channel* channel, std::uint32_t id)
      : TensorPrimitive(type.dtype, type.shape, device),
        channel_(channel),
        id_(id),
        scheme_(type.scheme),
        axes_(type.axes) {}
  ~RemoteTensor() override { channel_->release(id_); }
  // The client never writes a value in place: the server owns the storage.
  bool storage_unique() const noexcept override { return false; }
  const QuantScheme* quant_scheme() const noexcept override {
    return dtype_ == DType::QFloat ? &scheme_ : nullptr;
  }
  Channel* channel() const noexcept { return channel_; }
  std::uint32_t id() const noexcept { return id_; }
  // Its type as the server holds it: a QFloat tensor's scheme and axes with its dtype and shape.
  ir::TensorType type() const { return {dtype_, shape_, scheme_, axes_}; }
  // The shape the server found for a value-shaped result (before the handle is handed out).
  void set_shape(Shape shape) noexcept { shape_ = std::move(shape); }

 private:
  Channel* channel_;
  std::uint32_t id_;
  QuantScheme scheme_;
  Axes axes_;
};

class RemoteBackend final : public Backend {
 public:
  // Connects (Channel's errors) for device, a remote device whose address is address.
  RemoteBackend(Device device, const std::string& address, const std::string& token);

  std::string name() const override;
  Device device() const override { return device_; }
  DeviceSettings default_settings() const override { return channel_->welcome().settings; }
  DTypeUsageSet dtype_usage(DType dtype) const override;
  void seed(std::uint64_t seed) override;
  void sync() override;
  void flush() override { channel_->flush(); }
  MemoryStats memory_stats() const override;
  void memory_cleanup() override;
  void reset_peak_memory() override;
  void assign(const Primitive& dst, Primitive src) override;
  Channel& channel() noexcept { return *channel_; }
  // p as a tensor of this backend's server; DeviceMismatch naming op otherwise.
  const RemoteTensor& remote_tensor(const Primitive& p, std::string_view op) const;

#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  result name params override;
#include "kiln/detail/ops.def"
#undef KILN_OP

 private:
  template <OpCode code, class Result, class... Args>
  Result ship(const Args&... args);
  // op (its inputs and attributes filled in) with its results' ids and types, queued; the
  // results. input_types: one per op.inputs entry (null for an absent optional).
  std::vector<Primitive> send_op(ir::Op op, std::vector<ir::TensorType>& input_types);
  void simple_command(CommandKind kind, std::uint64_t value = 0);
  // UnsupportedDType naming op at the call, as locally, where the server's device cannot store
  // QFloat tensors.
  void check_stores_quantized(const char* op) const;

  const Device device_;
  std::unique_ptr<Channel> channel_;
  BackgroundRelease uploaded_;  // the bytes of uploads, freed off the caller's thread
};

}  // namespace kiln::remote
