// The IR form of each op, generated from ops.def (included by ir/op_ir.h, not on its own).
//
// For every op, OpTraits<code> names its Backend method; the method's parameter types decide
// what each argument becomes in an ir::Op (Primitive: an input id; OptionalPrimitive: an id or
// kNoTensor; PrimitiveList: a run of ids; any other type: an Attribute of that type) and its
// result how many outputs the op has (Primitive 1, PrimitivePair 2, a read future 0). From that:
//   Call<code>::make(ids, args...)   a call's arguments as an ir::Op (recording);
//   Call<code>::replay(...)          the op run on a Backend with its attributes converted back;
//   signature(code)                  the same facts at run time, for checks, printing, hashing.
// An op with a parameter or result type that has no IR form fails to compile here. Every op of
// ops.def has one today; none is left out.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace kiln::ir {

enum class SlotKind : std::uint8_t { Tensor, OptionalTensor, TensorList, Attribute };

struct Param {
  std::string_view name;
  SlotKind slot = SlotKind::Tensor;
  AttributeKind attribute = AttributeKind::Scalar;  // when slot is Attribute
  // An integer named dim* or an axis list named `axes`: which dims a kernel walks, part of the
  // structure hash (other integers and lists are sizes).
  bool names_dims = false;
};

struct OpSignature {
  std::string_view name;
  std::span<const Param> params;
  std::uint8_t tensors = 0;  // Tensor and OptionalTensor parameters
  bool tensor_list = false;  // one PrimitiveList parameter
  std::uint8_t attributes = 0;
  std::uint8_t outputs = 0;  // tensor results
  bool read = false;         // returns a future of host data (into_data, read_many)
};

const OpSignature& signature(OpCode code) noexcept;

// ---- generated from ops.def -------------------------------------------------------------------

template <OpCode code>
struct OpTraits;

#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  template <>                                                                            \
  struct OpTraits<OpCode::name> {                                                        \
    using Method = decltype(&Backend::name);                                             \
    static constexpr Method kMethod = &Backend::name;                                    \
    static constexpr std::string_view kName = #name;                                     \
    static constexpr std::string_view kParams = #params;                                 \
  };
#include "kiln/detail/ops.def"
#undef KILN_OP

namespace internal {

template <class T>
inline constexpr bool kAlwaysFalse = false;

// The Attribute alternative that holds a parameter of type P.
template <class P>
struct AttributeFor {
  using type = P;
};
template <>
struct AttributeFor<Device> {
  using type = DeviceAttr;
};
template <>
struct AttributeFor<ProcessGroup> {
  using type = GroupAttr;
};

template <class T, class Variant>
struct VariantIndex;
template <class T, class... Ts>
struct VariantIndex<T, std::variant<Ts...>> {
  static constexpr std::size_t value = [] {
    constexpr bool same[] = {std::is_same_v<T, Ts>...};
    for (std::size_t i = 0; i < sizeof...(Ts); ++i) {
      if (same[i]) return i;
    }
    return sizeof...(Ts);
  }();
};

template <class P>
constexpr SlotKind slot_of() {
  if constexpr (std::is_same_v<P, Primitive>) {
    return SlotKind::Tensor;
  } else if constexpr (std::is_same_v<P, OptionalPrimitive>) {
    return SlotKind::OptionalTensor;
  } else if constexpr (std::is_same_v<P, PrimitiveList>) {
    return SlotKind::TensorList;
  } else {
    static_assert(VariantIndex<typename AttributeFor<P>::type, Attribute>::value < kAttributeKinds,
                  "an ops.def parameter type has no IR form: add it to ir::Attribute "
                  "(src/ir/op_ir.h) with its wire encoding (src/ir/wire.cpp)");
    return SlotKind::Attribute;
  }
}

template <class R>
constexpr std::uint8_t outputs_of() {
  if constexpr (std::is_same_v<R, Primitive>) {
    return 1;
  } else if constexpr (std::is_same_v<R, PrimitivePair>) {
    return 2;
  } else if constexpr (std::is_same_v<R, ReadFuture> || std::is_same_v<R, ReadManyFuture>) {
    return 0;
  } else {
    static_assert(kAlwaysFalse<R>, "an ops.def result type has no IR form (src/ir/signature.h)");
    return 0;
  }
}

// The last word of the i-th entry of "(Type a, Type b, ...)": the parameter's name.
constexpr std::string_view param_name(std::string_view params, std::size_t i) {
  params = params.substr(1, params.size() - 2);
  for (; i > 0; --i) params = params.substr(params.find(',') + 1);
  params = params.substr(0, params.find(','));
  while (!params.empty() && params.back() == ' ') params.remove_suffix(1);
  return params.substr(params.find_last_of(' ') + 1);
}

template <class P>
constexpr Param make_param(std::string_view name) {
  Param param{name, slot_of<P>()};
  if constexpr (slot_of<P>() == SlotKind::Attribute) {
    param.attribute =
        static_cast<AttributeKind>(VariantIndex<typename AttributeFor<P>::type, Attribute>::value);
    param.names_dims = (param.attribute == AttributeKind::Int && name.starts_with("dim")) ||
                       (param.attribute == AttributeKind::Axes && name == "axes");
  }
  return param;
}

template <class R, class... P>
constexpr std::array<Param, sizeof...(P)> params_of(std::string_view text, R (Backend::*)(P...)) {
  std::array<Param, sizeof...(P)> params{};
  std::size_t i = 0;
  ((params[i] = make_param<P>(param_name(text, i)), ++i), ...);
  return params;
}

template <OpCode code>
inline constexpr auto kParams = params_of(OpTraits<code>::kParams,
                                          typename OpTraits<code>::Method{nullptr});

template <class Method>
struct ResultOf;
template <class R, class... P>
struct ResultOf<R (Backend::*)(P...)> {
  using type = R;
};

template <OpCode code>
constexpr OpSignature make_signature() {
  OpSignature sig{OpTraits<code>::kName, kParams<code>};
  int lists = 0;
  for (const Param& param : kParams<code>) {
    if (param.slot == SlotKind::Tensor || param.slot == SlotKind::OptionalTensor) ++sig.tensors;
    if (param.slot == SlotKind::TensorList) ++lists;
    if (param.slot == SlotKind::Attribute) ++sig.attributes;
  }
  sig.tensor_list = lists == 1;
  using R = typename ResultOf<typename OpTraits<code>::Method>::type;
  sig.outputs = outputs_of<R>();
  sig.read = std::is_same_v<R, ReadFuture> || std::is_same_v<R, ReadManyFuture>;
  return sig;
}

#define KILN_OP(name, ...)                               \
  static_assert(                                         \
      [] {                                               \
        int lists = 0;                                   \
        for (const Param& param : kParams<OpCode::name>) \
          lists += param.slot == SlotKind::TensorList;   \
        return lists <= 1;                               \
      }(),                                               \
      #name ": the IR holds at most one tensor list per op (ir/signature.h)");
#include "kiln/detail/ops.def"
#undef KILN_OP

// ---- recording: a call's arguments into an Op ----

inline void add_argument(Op& op, IdSource& ids, const Primitive& tensor) {
  op.inputs.push_back(ids.id_of(tensor));
}
inline void add_argument(Op& op, IdSource& ids, const OptionalPrimitive& tensor) {
  op.inputs.push_back(tensor ? ids.id_of(*tensor) : kNoTensor);
}
inline void add_argument(Op& op, IdSource& ids, const PrimitiveList& tensors) {
  for (const Primitive& tensor : tensors) op.inputs.push_back(ids.id_of(tensor));
}
inline void add_argument(Op& op, IdSource&, const Device& device) {
  op.attributes.emplace_back(DeviceAttr::of(device));
}
inline void add_argument(Op& op, IdSource&, const ProcessGroup& group) {
  op.attributes.emplace_back(GroupAttr::of(group));
}
template <class T>
void add_argument(Op& op, IdSource&, const T& value) {
  op.attributes.emplace_back(std::in_place_type<T>, value);
}

// ---- replay: an Op's arguments back into a call ----

struct ReplayInputs {
  const Op& op;
  std::vector<Primitive>& values;
  std::span<const bool> take;
  std::size_t list_size;

  Primitive fetch(std::size_t k) const {
    Primitive& value = values[op.inputs[k].index];
    return !take.empty() && take[k] ? std::move(value) : value;
  }
};

// Where parameter i's ids start in op.inputs, and its index in op.attributes.
template <OpCode code>
constexpr std::size_t tensors_before(std::size_t i) {
  std::size_t count = 0;
  for (std::size_t j = 0; j < i; ++j) count += kParams<code>[j].slot != SlotKind::Attribute;
  return count;
}
template <OpCode code>
constexpr bool list_before(std::size_t i) {
  for (std::size_t j = 0; j < i; ++j) {
    if (kParams<code>[j].slot == SlotKind::TensorList) return true;
  }
  return false;
}
template <OpCode code>
constexpr std::size_t attributes_before(std::size_t i) {
  std::size_t count = 0;
  for (std::size_t j = 0; j < i; ++j) count += kParams<code>[j].slot == SlotKind::Attribute;
  return count;
}

template <OpCode code, std::size_t I, class P>
P argument(const ReplayInputs& in) {
  constexpr std::size_t first = tensors_before<code>(I);
  const std::size_t k = first + (list_before<code>(I) ? in.list_size - 1 : 0);
  if constexpr (std::is_same_v<P, Primitive>) {
    return in.fetch(k);
  } else if constexpr (std::is_same_v<P, OptionalPrimitive>) {
    if (in.op.inputs[k] == kNoTensor) return std::nullopt;
    return in.fetch(k);
  } else if constexpr (std::is_same_v<P, PrimitiveList>) {
    PrimitiveList list;
    list.reserve(in.list_size);
    for (std::size_t j = 0; j < in.list_size; ++j) list.push_back(in.fetch(k + j));
    return list;
  } else if constexpr (std::is_same_v<P, Device>) {
    return std::get<DeviceAttr>(in.op.attributes[attributes_before<code>(I)]).to_device();
  } else if constexpr (std::is_same_v<P, ProcessGroup>) {
    return std::get<GroupAttr>(in.op.attributes[attributes_before<code>(I)]).to_group();
  } else {
    return std::get<P>(in.op.attributes[attributes_before<code>(I)]);
  }
}

inline void store_result(const Op& op, std::vector<Primitive>& values, std::vector<ReadResult>&,
                         Primitive result) {
  values[op.outputs[0].index] = std::move(result);
}
inline void store_result(const Op& op, std::vector<Primitive>& values, std::vector<ReadResult>&,
                         PrimitivePair result) {
  values[op.outputs[0].index] = std::move(result.first);
  values[op.outputs[1].index] = std::move(result.second);
}
inline void store_result(const Op&, std::vector<Primitive>&, std::vector<ReadResult>& reads,
                         ReadFuture result) {
  reads.emplace_back(std::move(result));
}
inline void store_result(const Op&, std::vector<Primitive>&, std::vector<ReadResult>& reads,
                         ReadManyFuture result) {
  reads.emplace_back(std::move(result));
}

template <OpCode code, class Method>
struct CallOf;
template <OpCode code, class R, class... P>
struct CallOf<code, R (Backend::*)(P...)> {
  static Op make(IdSource& ids, const P&... args) {
    Op op;
    op.code = code;
    (add_argument(op, ids, args), ...);
    return op;
  }

  // op has been checked against signature(code) and values holds every id it reads and writes.
  static void replay(Backend& backend, const Op& op, std::vector<Primitive>& values,
                     std::vector<ReadResult>& reads, std::span<const bool> take) {
    constexpr std::size_t fixed = tensors_before<code>(sizeof...(P));
    const ReplayInputs in{op, values, take, op.inputs.size() + 1 - fixed};
    replay_with(backend, op, in, reads, std::index_sequence_for<P...>{});
  }

 private:
  template <std::size_t... I>
  static void replay_with(Backend& backend, const Op& op, const ReplayInputs& in,
                          std::vector<ReadResult>& reads, std::index_sequence<I...>) {
    store_result(op, in.values, reads,
                 (backend.*OpTraits<code>::kMethod)(argument<code, I, P>(in)...));
  }
};

}  // namespace internal

template <OpCode code>
using Call = internal::CallOf<code, typename OpTraits<code>::Method>;

}  // namespace kiln::ir
