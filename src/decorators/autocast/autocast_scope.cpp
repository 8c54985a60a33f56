// AutocastScope's state: a stack of scopes per thread, and each scope's casts of held tensors.
#include <unordered_map>

#include "decorators/autocast/autocast_layer.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "runtime/registry.h"

namespace kiln {

struct AutocastScope::State {
  Device device;
  DType dtype;
  bool enabled;
  State* enclosing;
  // Casts of tensors held outside the op that used them, by source: the source is kept only
  // weakly, and an entry whose source has died is dropped when the table is swept.
  struct Cast {
    std::weak_ptr<TensorPrimitive> source;
    DType dtype;
    Primitive value;
  };
  std::unordered_multimap<const TensorPrimitive*, Cast> casts;
  std::size_t sweep_at = kFirstSweep;

  static constexpr std::size_t kFirstSweep = 64;
  void sweep() {
    std::erase_if(casts, [](const auto& entry) { return entry.second.source.expired(); });
    sweep_at = std::max(kFirstSweep, 2 * casts.size());
  }
};

namespace autocast {

std::atomic<int> live_scopes{0};

namespace {
thread_local AutocastScope::State* innermost = nullptr;
thread_local bool suspended = false;
}  // namespace

const AutocastScope::State* scope_for(const Device& device) noexcept {
  const AutocastScope::State* scope = innermost;
  if (scope == nullptr || suspended || !scope->enabled || !scope->device.same_hardware(device)) {
    return nullptr;
  }
  return scope;
}

Suspension::Suspension() noexcept : was_(suspended) { suspended = true; }
Suspension::~Suspension() { suspended = was_; }

Primitive cast_in_scope(Backend& backend, const Primitive& x, DType dtype) {
  AutocastScope::State* scope = innermost;
  // Held elsewhere: the op's own argument is one reference; a module's weight or a named
  // tensor adds at least one more. Temporaries are cast for their one use.
  if (scope == nullptr || x.use_count() < 2) return backend.cast(x, dtype);
  auto [first, last] = scope->casts.equal_range(x.get());
  for (auto it = first; it != last; ++it) {
    if (it->second.dtype == dtype && it->second.source.lock() == x) return it->second.value;
  }
  Primitive value = backend.cast(x, dtype);
  if (scope->casts.size() >= scope->sweep_at) scope->sweep();
  scope->casts.emplace(x.get(), AutocastScope::State::Cast{x, dtype, value});
  return value;
}

Primitive cast_weight(const Primitive& w) {
  if (live_scopes.load(std::memory_order_relaxed) == 0 || w->dtype() != DType::F32) return w;
  const AutocastScope::State* scope = scope_for(w->device());
  if (scope == nullptr) return w;
  const Suspension suspension;  // the chain below the layer records the cast
  return cast_in_scope(backend_for(w->device()), w, scope->dtype);
}

void forget_cast(const Primitive& x) noexcept {
  if (AutocastScope::State* scope = innermost) scope->casts.erase(x.get());
}

}  // namespace autocast

AutocastScope::AutocastScope(const Device& device, DType dtype, bool enabled) {
  if (dtype != DType::F16 && dtype != DType::BF16) {
    detail::fail<InvalidArgument>(
        "AutocastScope", "the low-precision dtype must be f16 or bf16, not ", dtype_name(dtype));
  }
  state_ = std::make_unique<State>(State{device, dtype, enabled, autocast::innermost, {}});
  autocast::innermost = state_.get();
  autocast::live_scopes.fetch_add(1, std::memory_order_relaxed);
}

AutocastScope::~AutocastScope() {
  // Scopes end in the reverse order of their making on their thread (they are not movable).
  autocast::innermost = state_->enclosing;
  autocast::live_scopes.fetch_sub(1, std::memory_order_relaxed);
}

Device AutocastScope::device() const noexcept { return state_->device; }
DType AutocastScope::dtype() const noexcept { return state_->dtype; }
bool AutocastScope::enabled() const noexcept { return state_->enabled; }

std::optional<DType> autocast_dtype(const Device& device) noexcept {
  if (autocast::live_scopes.load(std::memory_order_relaxed) == 0) return std::nullopt;
  const AutocastScope::State* scope = autocast::scope_for(device);
  if (scope == nullptr) return std::nullopt;
  return scope->dtype;
}

}  // namespace kiln
