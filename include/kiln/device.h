// Device: a small value naming where tensors live. The backend that runs ops is chosen at run
// time from the device; autodiff and fusion are flags on the device, not types.
//
//   Device dev = Device::cpu();
//   Device tracked = dev.autodiff();               // same hardware, gradients recorded
//   Device lazy = dev.fused();                     // ops recorded, run as fused kernels when read
//   std::cout << dev.backend_name();               // "cpu"; lazy.autodiff():
//   "autodiff<fusion<cpu>>" dev.set_default_dtypes(DType::F64, DType::I32, DType::Bool);  // once,
//   before first use Device::cuda(0).set_allow_tf32(true);        // any time: f32 products on tf32
//   tensor cores
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "kiln/dtype.h"

namespace kiln {

enum class DeviceKind : std::uint8_t { Cpu, Cuda, Remote };

// Per-device defaults, fixed at first use of the device.
struct DeviceSettings {
  DType float_dtype = DType::F32;
  DType int_dtype = DType::I64;
  DType bool_dtype = DType::Bool;
  bool operator==(const DeviceSettings&) const = default;
};

// What an elementwise op or an op along a dim returns when an operand is QFloat
// (Device::set_quant_propagation): a float tensor (Dequantize), or that result encoded again in
// the operand's blocks (Requantize).
enum class QuantPropagation : std::uint8_t { Dequantize, Requantize };

struct MemoryStats {
  std::int64_t bytes_in_use = 0;       // held by live tensors
  std::int64_t bytes_reserved = 0;     // held by the backend (in use + cached for reuse)
  std::int64_t peak_bytes_in_use = 0;  // high-water mark of bytes_in_use
};

// Kernels compiled at run time for a device (cuda: NVRTC, with an in-process and an on-disk
// cache). The CPU compiles nothing at run time: all zero there. A training loop's compiles all
// happen in its first steps; a count that still grows later means kernels keyed by something
// that changes per step.
struct KernelStats {
  std::int64_t compiles = 0;     // compiled from source (neither cache had the kernel)
  std::int64_t memory_hits = 0;  // found loaded in this process
  std::int64_t disk_hits = 0;    // loaded from the disk cache
  double compile_seconds = 0;    // total time compiling
  double disk_load_seconds = 0;  // total time loading from disk
};

class Device {
 public:
  static Device cpu() noexcept { return Device(DeviceKind::Cpu, 0); }
  // NotCompiled when kiln was built without CUDA; BackendUnavailable without a usable GPU.
  static Device cuda(int index = 0);
  // A `kiln serve` server, e.g. "remote://127.0.0.1:7878" ("tcp://" and a bare "HOST:PORT" are
  // accepted too): its ops run on the server's device. Connects at once, with the token of
  // KILN_REMOTE_TOKEN (or the one given): BackendUnavailable naming the address when no server
  // answers there, AuthenticationFailed when it refuses the token, ProtocolError when it speaks
  // another protocol version or op contract, NotCompiled in a build without the remote backend.
  static Device remote(const std::string& url);
  static Device remote(const std::string& url, const std::string& token);
  // The first available device in the order cuda:0, cpu; the environment variable KILN_DEVICE
  // overrides it ("cpu", "cuda", "cuda:N", "remote://host:port"); a bad value -> InvalidArgument.
  // Fused (see fused()) unless the environment sets KILN_FUSION=0.
  static Device default_device();
  // Parses the KILN_DEVICE forms above.
  static Device parse(const std::string& text);
  // Devices of a kind usable here (0 when not compiled in or unavailable).
  static int count(DeviceKind kind);

  DeviceKind kind() const noexcept { return static_cast<DeviceKind>((bits_ >> kKindShift) & 0xff); }
  int index() const noexcept { return static_cast<int>(static_cast<std::uint32_t>(bits_)); }
  bool is_autodiff() const noexcept { return (bits_ & kAutodiffBit) != 0; }
  Device autodiff() const noexcept { return Device(bits_ | kAutodiffBit); }
  Device without_autodiff() const noexcept { return Device(bits_ & ~kAutodiffBit); }
  // The fusion decorator: ops on a fused device are checked at the call and recorded; they run
  // when a value is needed (a read, a sync, an op that does not fuse, a full queue), elementwise
  // chains and a trailing op along a dim as one kernel, so intermediates nobody holds are never
  // written to memory. Results equal the unfused device's (on cuda, f32 and f64 values may differ
  // by the rounding of a multiply and an add contracted into one FMA). autodiff() and fused()
  // combine: Device::cpu().fused().autodiff() runs autodiff<fusion<cpu>>.
  bool is_fused() const noexcept { return (bits_ & kFusedBit) != 0; }
  Device fused() const noexcept { return Device(bits_ | kFusedBit); }
  Device without_fusion() const noexcept { return Device(bits_ & ~kFusedBit); }
  // A remote device's url, "remote://HOST:PORT" (empty for other kinds).
  std::string url() const;

  // The backend chain that runs ops here, e.g. "cpu", "autodiff<cpu>" or "fusion<cpu>".
  std::string backend_name() const;
  // The settings in force; the first call (or the first op) fixes them.
  DeviceSettings settings() const;
  // Sets the default dtypes once, before first use. UnsupportedDType if the device cannot use
  // one of them (nothing is set); AlreadyInitialized if the settings are already fixed.
  void set_default_dtypes(DType float_dtype, DType int_dtype, DType bool_dtype) const;
  // Whether f32 matrix products (matmul, and the products inside conv and its gradients) may
  // run on tf32 tensor cores: inputs rounded to 10 mantissa bits (about 1e-3 relative error
  // instead of f32's 1e-6), several times the speed. Off by default. A run-time switch, unlike
  // the default dtypes: it may change at any time, and ops issued afterwards see the new value
  // (torch.backends.cuda.matmul.allow_tf32). One flag per hardware device (a device and its
  // autodiff() view share it). Stored on every device; only cuda acts on it (the CPU computes
  // f32 products in f32 whatever it says).
  //   Device gpu = Device::cuda(0);
  //   gpu.set_allow_tf32(true);   // f32 matmuls on gpu from here on use tf32
  void set_allow_tf32(bool allow) const;
  bool allow_tf32() const;
  // What the ops whose Tensor methods ops.def generates (the elementwise maths, comparisons,
  // reductions and ops along a dim) return when an operand on this device is QFloat: they
  // compute on the dequantized values, and under Dequantize (the default) return that float
  // tensor; under Requantize the result is encoded again in the scheme of the first QFloat
  // operand, where it is a float tensor whose last dim holds whole blocks of that scheme and
  // takes no gradient (otherwise it stays float; a NaN or infinite value then throws
  // InvalidArgument, as quantize does). Products, lookups, views and the other ops are not
  // affected: a product with a quantized weight returns its activations' dtype either way. A
  // run-time switch of the hardware device, like allow_tf32 (burn's QuantPropagation).
  //   cpu.set_quant_propagation(QuantPropagation::Requantize);   // q * 2 stays QFloat
  void set_quant_propagation(QuantPropagation propagation) const;
  QuantPropagation quant_propagation() const;
  DTypeUsageSet dtype_usage(DType dtype) const;
  bool supports_dtype(DType dtype) const;
  void seed(std::uint64_t seed) const;
  void sync() const;
  void flush() const;
  MemoryStats memory_stats() const;
  // Releases memory cached by the backend's allocator.
  void memory_cleanup() const;
  // Starts a new high-water mark: peak_bytes_in_use becomes the current bytes_in_use.
  void reset_peak_memory() const;
  // This device's run-time kernel compiles so far (shared by its autodiff and fused views).
  KernelStats kernel_stats() const;

  std::string to_string() const;
  bool operator==(const Device& other) const noexcept { return bits_ == other.bits_; }
  // Same hardware, ignoring the autodiff and fusion flags.
  bool same_hardware(const Device& other) const noexcept {
    return ((bits_ ^ other.bits_) & ~(kAutodiffBit | kFusedBit)) == 0;
  }

 private:
  Device(DeviceKind kind, int index, bool autodiff = false, bool fused = false) noexcept
      : bits_(static_cast<std::uint32_t>(index) |
              (std::uint64_t{static_cast<std::uint8_t>(kind)} << kKindShift) |
              (autodiff ? kAutodiffBit : 0) | (fused ? kFusedBit : 0)) {}
  explicit Device(std::uint64_t bits) noexcept : bits_(bits) {}

  // One word: the index (a GPU ordinal, or the id of an interned remote url) in the low 32 bits,
  // the kind above it, then the flags. Every op copies and compares its operands' devices; as a
  // byte, an int and two bools they were copied piecewise and read back whole, which stalled on
  // the stores (a tenth of a small add).
  static constexpr int kKindShift = 32;
  static constexpr std::uint64_t kAutodiffBit = std::uint64_t{1} << 40;
  static constexpr std::uint64_t kFusedBit = std::uint64_t{1} << 41;
  std::uint64_t bits_ = 0;
};
static_assert(sizeof(Device) == 8);

std::ostream& operator<<(std::ostream& out, const Device& device);

}  // namespace kiln
