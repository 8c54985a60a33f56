// DataParallel's work (kiln/train/data_parallel.h): the broadcast of the parameters and the
// bucketed all-reduce of the gradients, overlapped with backward through its leaf hook.
#include "kiln/train/data_parallel.h"

#include <future>
#include <unordered_map>

#include "kiln/detail/format.h"
#include "kiln/distributed.h"
#include "kiln/train/learner.h"

namespace kiln::train::detail {
namespace {

using kiln::detail::fail;

// The gradients of one backward pass, reduced bucket by bucket in order.
class Reducer {
 public:
  Reducer(const std::vector<Primitive>& params, const ProcessGroup& group,
          const DataParallelOptions& options)
      : group_(group) {
    // Reverse order: the parameters of the last layers get their gradients first.
    std::size_t bytes = 0;
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      const Primitive& p = *it;
      const std::optional<std::uint64_t> leaf = kiln::detail::leaf_id(p);
      if (!leaf || slot_of_.count(*leaf) != 0) continue;  // untracked, or shared and seen
      const std::size_t size =
          static_cast<std::size_t>(p->shape().num_elements()) * dtype_size(p->dtype());
      const bool fits = !buckets_.empty() && bytes + size <= options.bucket_bytes &&
                        slots_[buckets_.back().slots.back()].dtype == p->dtype() &&
                        slots_[buckets_.back().slots.back()].device == p->device();
      if (!fits) {
        buckets_.emplace_back();
        bytes = 0;
      }
      bytes += size;
      slot_of_.emplace(*leaf, slots_.size());
      buckets_.back().slots.push_back(slots_.size());
      ++buckets_.back().missing;
      slots_.push_back(Slot{*leaf, p->shape(), p->dtype(), p->device(), buckets_.size() - 1, {}});
    }
  }

  // Called by backward as the gradient of leaf becomes final.
  void ready(std::uint64_t leaf, const Primitive& grad) {
    auto it = slot_of_.find(leaf);
    if (it == slot_of_.end()) return;
    Slot& slot = slots_[it->second];
    if (slot.grad) return;
    slot.grad = grad;
    --buckets_[slot.bucket].missing;
    launch_ready();
  }

  // After backward: the gradients it did not hand over are taken from grads (or are zeros),
  // the remaining buckets go out, and every averaged gradient replaces its own in grads.
  void finish(Gradients& grads) {
    for (Slot& slot : slots_) {
      if (slot.grad) continue;
      std::optional<Primitive> own = grads.find(slot.leaf);
      slot.grad = own ? *own
                      : kiln::detail::full(slot.shape, 0, slot.dtype,
                                           slot.device.without_autodiff(), Kind::Float);
      --buckets_[slot.bucket].missing;
    }
    launch_ready();
    for (Bucket& bucket : buckets_) {
      const Primitive reduced = bucket.reduced.get();  // rethrows the bucket's DistributedError
      std::vector<std::int64_t> sizes;
      for (std::size_t s : bucket.slots) sizes.push_back(slots_[s].shape.num_elements());
      const kiln::detail::Prims pieces = kiln::detail::split_sizes(reduced, sizes, 0);
      for (std::size_t k = 0; k < bucket.slots.size(); ++k) {
        const Slot& slot = slots_[bucket.slots[k]];
        Primitive grad = kiln::detail::reshape(pieces[k], slot.shape, slot.shape.rank());
        grads.put(slot.leaf, kiln::detail::from_inner(std::move(grad)));
      }
    }
  }

 private:
  struct Slot {
    std::uint64_t leaf;
    Shape shape;
    DType dtype;
    Device device;
    std::size_t bucket;
    Primitive grad;
  };
  struct Bucket {
    std::vector<std::size_t> slots;
    std::size_t missing = 0;
    std::shared_future<Primitive> reduced;
  };

  // Sends out, in order, every bucket whose gradients are all there.
  void launch_ready() {
    while (next_ < buckets_.size() && buckets_[next_].missing == 0) launch(next_++);
  }

  // The bucket's gradients joined end to end (on this thread, where backward runs), then
  // averaged over the ranks on a thread of its own, after the bucket before it.
  void launch(std::size_t k) {
    kiln::detail::Prims flat;
    for (std::size_t s : buckets_[k].slots) {
      const Slot& slot = slots_[s];
      const Primitive grad = kiln::detail::inner(slot.grad);
      flat.push_back(kiln::detail::reshape(grad, Shape{slot.shape.num_elements()}, 1));
    }
    Primitive joined = flat.size() == 1 ? flat[0] : kiln::detail::cat(std::move(flat), 0);
    std::shared_future<Primitive> before =
        k > 0 ? buckets_[k - 1].reduced : std::shared_future<Primitive>();
    buckets_[k].reduced =
        std::async(std::launch::async, [joined = std::move(joined), before, group = group_]() {
          if (before.valid()) before.wait();
          return distributed::detail::all_reduce(joined, group, ReduceOperation::Mean);
        }).share();
  }

  ProcessGroup group_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::unordered_map<std::uint64_t, std::size_t> slot_of_;
  std::size_t next_ = 0;
};

class Broadcast final : public nn::Visitor {
 public:
  explicit Broadcast(const ProcessGroup& group) : group_(group) {}
  void visit(const std::string& name, nn::ParamSlot& slot) override {
    const Primitive value = kiln::detail::inner(slot.primitive());
    slot.assign(distributed::detail::broadcast(value, group_, 0), name);
  }

 private:
  const ProcessGroup& group_;
};

}  // namespace

void check_options(const DataParallelOptions& options) {
  if (options.bucket_bytes == 0) {
    fail<InvalidArgument>("DataParallel", "bucket_bytes must be positive");
  }
}

void broadcast_parameters(void* module, nn::detail::VisitFn visit, const ProcessGroup& group) {
  if (group.size() == 1) return;
  Broadcast broadcast(group);
  visit(module, broadcast);
}

Gradients data_parallel_backward(const std::vector<Primitive>& params, const Primitive& loss,
                                 const ProcessGroup& group, const DataParallelOptions& options) {
  if (group.size() == 1) return kiln::detail::backward(loss, std::nullopt, {});
  Reducer reducer(params, group, options);
  BackwardOptions backward;
  if (options.overlap) {
    backward.on_leaf_gradient = [&](std::uint64_t leaf, const Primitive& grad) {
      reducer.ready(leaf, grad);
    };
  }
  Gradients grads = kiln::detail::backward(loss, std::nullopt, backward);
  reducer.finish(grads);
  return grads;
}

void sum_over_ranks(PassMetrics& metrics, const DataParallel& data_parallel) {
  const ProcessGroup& group = data_parallel.group();
  if (group.size() == 1) return;
  // Sums of at most 2^53 samples are exact in f64.
  const std::vector<double> local{metrics.loss_sum, static_cast<double>(metrics.samples),
                                  static_cast<double>(metrics.correct),
                                  metrics.classifier ? 1.0 : 0.0};
  const auto device = Device::cpu();
  const auto sums =
      distributed::all_reduce(Tensor<1>::from_data(TensorData::from_vec(local), device), group);
  const std::vector<double> total = sums.into_data().to_vec<double>();
  metrics.loss_sum = total[0];
  metrics.samples = static_cast<std::int64_t>(total[1]);
  metrics.correct = static_cast<std::int64_t>(total[2]);
  metrics.classifier = total[3] > 0;
}

int rank0_start(int start, const DataParallel& data_parallel) {
  const ProcessGroup& group = data_parallel.group();
  if (group.size() == 1) return start;
  const auto mine = Tensor<1, Int>::from_data(
      TensorData::from_vec(std::vector<std::int64_t>{start}), Device::cpu());
  return static_cast<int>(distributed::broadcast(mine, group, 0).into_scalar<std::int64_t>());
}

void all_reduce_gradients(const std::vector<Primitive>& params, Gradients& grads,
                          const ProcessGroup& group, const DataParallelOptions& options) {
  if (group.size() == 1) return;
  Reducer reducer(params, group, options);
  reducer.finish(grads);
}

}  // namespace kiln::train::detail
