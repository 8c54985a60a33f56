// The fusion decorator: `dev.fused()` runs ops here. An op whose impl in ops.def has an F (an
// elementwise op, or one along a dim that reads whole lines) is recorded, not run: it returns a
// FusionTensor of a pending node at once (the tensor layer has checked shapes, dtypes and devices
// before the call, so errors still come at the call). A pending value is computed when it is
// needed: read, synced, given to an op without F, or when a new op would make its group too big.
// Then the pending ops it depends on that iterate over the same shape run as one group through
// the inner backend's run_fused (one kernel where the backend can fuse, step by step otherwise);
// intermediates nobody holds are never written out, held ones once.
//
// FusionPassthrough has every op of ops.def: inputs computed, the inner backend runs the op, the
// result is a computed node. FusionBackend overrides the ops with F (fusion_ops.cpp).
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "contract/forwarding.h"
#include "core/visibility.h"
#include "decorators/fusion/group_controls.h"
#include "decorators/fusion/lazy_node.h"
#include "kiln/detail/op_columns.h"

namespace kiln::fusion {

// Most ops one group runs: a new op over inputs whose pending ops would pass it computes them
// first. Bounds the work a read can trigger and the time a group holds its inputs.
inline constexpr std::uint32_t kMaxGroupOps = 64;
// Held pending values the decorator lets accumulate before it computes them all (the bounded
// queue: a loop that records without reading cannot grow memory without end).
inline constexpr std::size_t kMaxQueued = 1024;

struct Group;  // fusion_backend.cpp

class FusionPassthrough : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;

  std::string name() const override { return "fusion<" + inner().name() + ">"; }
  Device device() const override { return device_; }
  // Computes every held pending value, then the inner backend's.
  void sync() override;
  void flush() override;
  // Computes every held pending value first: a pending op may read dst's old values.
  void assign(const Primitive& dst, Primitive src) override;

  // (Not exported, unlike the class, whose type the tests name.)
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  KILN_INTERNAL result name params override;
#include "kiln/detail/ops.def"
#undef KILN_OP

  // The inner backend's tensor for p: a FusionTensor's value (its pending ops run first), or p
  // itself when it is the inner backend's already (a constant from the unfused device).
  Primitive computed(const Primitive& p);
  // A computed node showing inner, the inner backend's tensor.
  Primitive wrap_computed(Primitive inner) const;
  // The fusion checker (KILN_FUSION_CHECK=1 in the environment when the backend is made): every
  // group that runs fused also runs step by step, and a difference beyond the dtype's tolerance
  // throws FusionMismatch naming the group's ops.
  void set_check(bool check) noexcept { check_.store(check, std::memory_order_relaxed); }
  bool check() const noexcept { return check_.load(std::memory_order_relaxed); }
  // Tests only: called on the results of each group that runs fused, before they are checked and
  // kept (a fault injected here is what the checker must catch). Null: none.
  using ResultHook = std::function<void(const FusedProgram&, std::vector<Primitive>&)>;
  void set_result_hook_for_tests(ResultHook hook) {
    std::lock_guard lock(mutex_);
    result_hook_ = std::move(hook);
  }

  // Which groups run fused, which are printed or made wrong (group_controls.h: read from the
  // environment when the backend is made; tests set them here).
  void set_group_controls_for_tests(const GroupControls& controls) {
    std::lock_guard lock(mutex_);
    controls_ = controls;
  }

  // Groups handed to the inner backend so far (tests).
  std::uint64_t groups_run() const noexcept { return groups_run_.load(std::memory_order_relaxed); }

 protected:
  // The tensor inputs of a recorded op, moved in (a braced list of none to three).
  struct RecordInputs {
    std::array<Primitive, 3> items;
    std::uint8_t count;
    RecordInputs() : count(0) {}                                  // random
    RecordInputs(Primitive a) : items{std::move(a)}, count(1) {}  // NOLINT: {x} at the call
    RecordInputs(Primitive a, Primitive b) : items{std::move(a), std::move(b)}, count(2) {}
    RecordInputs(Primitive a, Primitive b, Primitive c)
        : items{std::move(a), std::move(b), std::move(c)}, count(3) {}
  };
  // A pending node: op over inputs with params gives dtype and shape; run does it on a backend.
  // Small work over computed inputs runs at once instead (min_fused_elements).
  Primitive record(OpCode op, DType dtype, Shape shape, const StepParams& params,
                   RecordInputs inputs, StepRun run);

 private:
  // The node of p, made for a computed value on first use. The caller holds mutex_.
  NodeRef node_of(const Primitive& p) const;
  // Runs op at once on the inner backend when its work is small and every input's value is known
  // without the lock; null otherwise.
  Primitive run_now(std::int64_t space, RecordInputs& inputs, const StepParams& params,
                    const Shape& shape, StepRun run);
  // Runs target's group (and, first, any input outside it). The caller holds mutex_. With into
  // (an inner tensor of target's dtype and shape whose old values nothing reads any more), the
  // inner backend is offered to write target's value there (FusedProgram::write_into); true when
  // it did, and target's value is then into.
  bool compute_locked(const NodeRef& target, const Primitive& into = nullptr);
  // computed(p) for a caller that holds mutex_.
  Primitive computed_locked(const Primitive& p);
  // The space of target's group: target's own; or, where the inner backend runs a reduction's
  // epilogue in its kernels (Backend::fuses_reduction_epilogues), for an elementwise op over the
  // result of a pending reduction along a dim (through elementwise ops of that result's shape),
  // the reduction's input's, with the result's shape as epilogue (else epilogue is rank 0).
  Shape group_space(const LazyNode& target, Shape& epilogue) const;
  // Gathers target's group over space (and the pending elementwise nodes of the epilogue's
  // shape, where it has a rank); false when gathering computed one of its steps.
  bool gather(Group& group, const NodeRef& target, const Shape& space, const Shape& epilogue);
  // Computes every held pending node but those of skip (kept queued).
  void flush_locked(std::span<const LazyNode* const> skip = {});

  std::mutex mutex_;
  std::vector<std::weak_ptr<LazyNode>> queued_;  // pending nodes recorded, for flush
  // queued_'s size at which the nodes no longer pending or held are dropped from it: twice what
  // the last purge kept, so a purge costs O(1) per record, and at least kPurgeAt, so the dead
  // nodes' memory (kept by their weak references until then) is reused while it is in cache.
  static constexpr std::size_t kPurgeAt = 64;
  std::size_t purge_at_ = kPurgeAt;
  std::uint64_t gathers_ = 0;  // gathers so far, each one's stamp on the nodes it takes
  std::atomic<std::uint64_t> groups_run_{0};
  std::atomic<bool> check_{check_from_environment()};
  // The inner backend's min_fused_elements() and fuses_reduction_epilogues() and this
  // decorator's device, asked once.
  const std::int64_t min_fused_ = inner().min_fused_elements();
  const bool reduction_epilogues_ = inner().fuses_reduction_epilogues();
  const Device device_ = inner().device().fused();
  ResultHook result_hook_;
  GroupControls controls_ = GroupControls::from_environment();  // guarded by mutex_
  static bool check_from_environment() noexcept;
  void check_group(const FusedProgram& program, const std::vector<Primitive>& fused);
};

// The fusion decorator over inner: the registry's for a fused device; tests wrap a backend of
// their own.
std::shared_ptr<FusionPassthrough> make_fusion_backend(std::shared_ptr<Backend> inner);

class KILN_INTERNAL FusionBackend final : public FusionPassthrough {
 public:
  using FusionPassthrough::FusionPassthrough;

  // ---- the ops recorded lazily: impl F in ops.def (fusion_ops.cpp) ----
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  KILN_WHEN(KILN_IMPL_FUSE(impl))(result name params override;)
#include "kiln/detail/ops.def"
#undef KILN_OP
};

}  // namespace kiln::fusion
