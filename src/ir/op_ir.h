// The op IR: every op of ops.def as a value, for capture/replay, the remote channel and (later)
// fusion. A Program is a list of ops in SSA form over a table of tensor values:
//
//   %0 = input f32 [64, 300]
//   %1 = input f32 [64, 300]
//   %2 = add(%0, %1) f32 [64, 300]
//   %3 = sum_dim(%2, dim=1) f32 [64, 1]
//
// Ids are dense: the program's inputs and the ops' outputs number 0..value_count()-1 between
// them, each defined once (a recorder numbers them in order of appearance, so an input first
// read halfway through a recording gets the next free id); an op reads only values defined
// before it. An op keeps the arguments of its Backend
// call in parameter order: tensors as ids in `inputs` (an absent optional tensor is kNoTensor, a
// tensor list contributes all its ids), everything else as an Attribute in `attributes`.
// Which parameters an op has, and their kinds, comes from ops.def (signature(code),
// ir/signature.h).
//
// Nothing here is public API: src/ir is internal to libkiln.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "contract/backend.h"
#include "contract/op_code.h"

namespace kiln::ir {

// A value of a program: its index in the program's value table.
struct TensorId {
  std::uint32_t index = 0;
  bool operator==(const TensorId&) const = default;
};
// An absent optional tensor (conv's bias, attention's mask).
inline constexpr TensorId kNoTensor{0xffffffffu};

// A value's dtype and shape; a QFloat value's type also names its blocks: their scheme, and for a
// view that moved their dims (permute, swap_dims) the dim of the stored shape (blocks along its
// last dim) that each of its dims shows, `axes` (empty in stored order). Both stay default for
// every other dtype. A Recorder knows a primitive's dtype and shape only: it records a QFloat
// value with the default scheme and axes (the remote layer, src/remote/infer.h, tracks the real
// ones and checks them).
struct TensorType {
  DType dtype = DType::F32;
  Shape shape;
  QuantScheme scheme{};
  Axes axes{};
  bool operator==(const TensorType&) const = default;
};

// A Device as plain, portable data: a remote device's index is a process-local handle, so the
// url travels instead. to_device() builds the Device again (throws as Device::cuda/remote do
// when the machine has no such device).
struct DeviceAttr {
  DeviceKind kind = DeviceKind::Cpu;
  std::int32_t index = 0;  // cuda ordinal; 0 otherwise
  bool autodiff = false;
  bool fused = false;
  std::string url;  // remote only
  bool operator==(const DeviceAttr&) const = default;

  static DeviceAttr of(const Device& device);
  Device to_device() const;
};

// A ProcessGroup as plain data: a group is a live object of one process, so its number there
// (ProcessGroup::id) travels, with its rank and size for printing; a recorded op also holds the
// group itself, which to_group() returns (a deserialised one has none: InvalidArgument). Equal
// by number, rank and size.
struct GroupAttr {
  std::uint64_t id = 0;
  std::int32_t rank = 0;
  std::int32_t size = 1;
  std::shared_ptr<const ProcessGroup> live;
  bool operator==(const GroupAttr& other) const noexcept {
    return id == other.id && rank == other.rank && size == other.size;
  }

  static GroupAttr of(const ProcessGroup& group);
  const ProcessGroup& to_group() const;
};

// Every non-tensor parameter type that ops.def uses. A parameter of a type missing here stops
// the build (ir/signature.h), so a new op cannot lack an IR form silently.
using Attribute =
    std::variant<Scalar, std::int64_t, bool, double, DType, Shape, Axes, ResolvedSlices,
                 Distribution, IndexingUpdate, ReduceOperation, ConvOptions, ConvTransposeOptions,
                 PoolOptions, UnfoldOptions, InterpolateOptions, AttentionOptions, QuantScheme,
                 DeviceAttr, TensorData, GroupAttr>;

// The alternatives of Attribute in order; the numbers are the wire encoding, never reordered.
enum class AttributeKind : std::uint8_t {
  Scalar,
  Int,
  Bool,
  Double,
  DType,
  Shape,
  Axes,
  Slices,
  Distribution,
  IndexingUpdate,
  ReduceOperation,
  Conv,
  ConvTranspose,
  Pool,
  Unfold,
  Interpolate,
  Attention,
  QuantScheme,
  Device,
  Data,
  Group,
};
inline constexpr std::size_t kAttributeKinds = std::variant_size_v<Attribute>;
static_assert(static_cast<std::size_t>(AttributeKind::Group) + 1 == kAttributeKinds,
              "AttributeKind lists the alternatives of Attribute");

inline AttributeKind kind_of(const Attribute& attribute) noexcept {
  return static_cast<AttributeKind>(attribute.index());
}
std::string_view attribute_kind_name(AttributeKind kind) noexcept;
// Equality with floating-point values compared bit for bit (a NaN scalar equals itself), so a
// program equals its deserialised copy.
bool same_attribute(const Attribute& a, const Attribute& b);
std::string to_string(const Attribute& attribute);

struct Op {
  OpCode code{};
  std::vector<TensorId> inputs;
  std::vector<Attribute> attributes;
  std::vector<TensorId> outputs;
  std::vector<TensorType> output_types;  // one per output

  bool operator==(const Op& other) const;
};

struct ProgramInput {
  TensorId id;
  TensorType type;
  bool operator==(const ProgramInput&) const = default;
};

struct Program {
  std::vector<ProgramInput> inputs;  // what run() takes, in this order
  std::vector<Op> ops;
  std::vector<TensorId> outputs;  // the values the program hands back, in this order

  // The number of values: inputs plus every op's outputs.
  std::uint32_t value_count() const;
  bool operator==(const Program& other) const = default;
};

// ---- printing and hashing ------------------------------------------------------------------

// "%3 = add(%1, %2) f32 [64, 300]"; attributes by parameter name: "sum_dim(%2, dim=1)".
std::string to_string(const Op& op);
// One line per input and op, then "return %3, %5".
std::string to_string(const Program& program);

// A hash of a program's structure, the key of a compiled kernel or a captured graph. In it:
// op codes, input wiring (ids, absent optionals), the program's inputs and every output's dtype
// and rank (and a QFloat value's scheme and axes), the kinds of all attributes, and the values of
// the attributes that change what a kernel does: dtypes, bools, enums (indexing update, reduce
// operation, interpolation mode, distribution kind, quantization mode and bits), devices, integer
// parameters named dim* and axis lists named `axes` (which dims a kernel walks), the flags of
// option structs and the ranks of their per-dim vectors. Not in it: scalar values (only their
// kind), doubles, every size (shapes, other integers such as arange's bounds or topk's k,
// output_size, strides, paddings, kernel sizes, groups), slice bounds and tensor data; they are
// parameters of a kernel, not part of its key.
std::uint64_t structure_hash(const Program& program);
std::uint64_t structure_hash(const Op& op);

// ---- validation and the wire format -----------------------------------------------------------

// Checks program against ops.def: known op codes, the arity and attribute kinds of each op's
// signature, every id below value_count() and defined once, before it is read, valid dtypes and
// shapes.
// InvalidArgument naming the op and what was wrong.
void validate(const Program& program);

inline constexpr std::uint32_t kWireMagic = 0x52494b4b;  // "KKIR" little-endian
// 2: QuantScheme names its block kind and QFloat data carries its scheme. 3: process groups and
// the reductions max and min (the collectives). 4: a QFloat tensor type carries its scheme and
// axes. 5: attention's dropout (a seed operand, and its probability in AttentionOptions).
inline constexpr std::uint32_t kWireVersion = 5;

// Little-endian, length-prefixed:
//   u32 magic, u32 version, u64 kBackendContractHash,
//   u32 n, n × (u32 id, tensor type: u8 dtype, [QFloat: u8 kind, i64 block size, u32 n,
//               n × i64 axes], u32 rank, rank × i64),
//   u32 n, n × (u32 byte length, op: u16 code, u32 n, n × u32 id, u32 n, n × (u8 kind, payload),
//               u32 n, n × (u32 id, tensor type)),
//   u32 n, n × u32 id.
std::vector<std::byte> serialize(const Program& program);
// Reads what serialize wrote, checking every length, count, code, kind, id and value against the
// buffer and ops.def; ProtocolError naming what was wrong. Never reads past bytes.
Program deserialize(std::span<const std::byte> bytes);

// ---- recording and replay ----------------------------------------------------------------------

// Hands out ids for the tensors a recorded call reads.
class IdSource {
 public:
  virtual TensorId id_of(const Primitive& tensor) = 0;

 protected:
  ~IdSource() = default;
};

using ReadResult = std::variant<ReadFuture, ReadManyFuture>;

// Replay checks structure (each op against ops.def, every value it reads present, the inputs'
// and results' types in run), not values: dims in range, shapes that broadcast and the other
// checks of the tensor layer are assumed done when the op was recorded. A server replaying
// programs from the network must check those before handing them to a backend (the remote issue).
//
// Runs op on backend: its tensor arguments taken from values by id (moved out where take[k] is
// true for input k, so the backend may reuse the memory; empty take copies all), its attributes
// converted back, its results stored at its output ids (values grows as needed). A read op
// (into_data, read_many) appends its future to reads. InvalidArgument if op does not match its
// signature or reads a value that is not there.
void replay(Backend& backend, const Op& op, std::vector<Primitive>& values,
            std::vector<ReadResult>& reads, std::span<const bool> take = {});

// replay without its checks, for ops a recorder of this process made from calls that ran
// (capture): values already has room for every id op reads and writes.
void replay_unchecked(Backend& backend, const Op& op, std::vector<Primitive>& values,
                      std::vector<ReadResult>& reads, std::span<const bool> take);

struct RunResult {
  std::vector<Primitive> outputs;  // program.outputs, in order
  std::vector<ReadResult> reads;   // one per read op, in program order
};
// Runs a whole program with its inputs; each value is handed over at its last use and freed
// after it. InvalidArgument if an input or a result disagrees with the program's types.
RunResult run(Backend& backend, const Program& program, std::vector<Primitive> inputs);

// Records calls into a Program. Tensors it has not seen become inputs of the program; the
// recorder holds every tensor it has numbered, so an address is never reused for another one
// while recording.
//
//   ir::Recorder recorder;
//   Primitive c = backend.add(a, b);
//   recorder.record<OpCode::add>(c, a, b);
//   recorder.mark_output(c);
//   ir::Program program = recorder.program();
class Recorder : public IdSource {
 public:
  TensorId id_of(const Primitive& tensor) override;

  template <OpCode code, class Result, class... Args>
  void record(const Result& result, const Args&... args);

  void mark_output(const Primitive& tensor) { program_.outputs.push_back(id_of(tensor)); }
  const Program& program() const noexcept { return program_; }

 private:
  void add_output(Op& op, const Primitive& tensor);
  void add_results(Op& op, const Primitive& result) { add_output(op, result); }
  void add_results(Op& op, const PrimitivePair& result) {
    add_output(op, result.first);
    add_output(op, result.second);
  }
  void add_results(Op&, const ReadFuture&) {}
  void add_results(Op&, const ReadManyFuture&) {}

  Program program_;
  std::uint32_t next_id_ = 0;
  std::unordered_map<const TensorPrimitive*, TensorId> ids_;
  std::vector<Primitive> held_;
};

}  // namespace kiln::ir

#include "ir/signature.h"  // IWYU pragma: export (Call<code>, used by Recorder::record)

namespace kiln::ir {

template <OpCode code, class Result, class... Args>
void Recorder::record(const Result& result, const Args&... args) {
  Op op = Call<code>::make(*this, args...);
  add_results(op, result);
  program_.ops.push_back(std::move(op));
}

}  // namespace kiln::ir
