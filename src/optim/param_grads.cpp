#include "optim/param_grads.h"

#include <set>

namespace kiln::optim::detail {
namespace {

class CollectGrads final : public nn::Visitor {
 public:
  explicit CollectGrads(const Gradients& grads) : grads_(grads) {}
  void visit(const std::string&, nn::ParamSlot& slot) override {
    if (!slot.trainable() || !seen_.insert(slot.primitive().get()).second) return;
    if (std::optional<Primitive> g = kiln::detail::grad(slot.primitive(), grads_)) {
      found.push_back({slot.primitive(), kiln::detail::inner(std::move(*g))});
    }
  }
  std::vector<ParamGrad> found;

 private:
  const Gradients& grads_;
  std::set<const TensorPrimitive*> seen_;
};

}  // namespace

std::vector<ParamGrad> collect_param_grads(void* module, nn::detail::VisitFn visit,
                                           const Gradients& grads) {
  CollectGrads collector(grads);
  visit(module, collector);
  return std::move(collector.found);
}

}  // namespace kiln::optim::detail
