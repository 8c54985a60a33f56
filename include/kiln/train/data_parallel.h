// Data-parallel training: one process per rank (`kiln launch --nproc N -- PROGRAM`), each with a
// whole copy of the model and its own shard of every batch. Every rank starts from rank 0's
// parameters, and after each backward pass holds the gradients averaged over the ranks (mean),
// so every rank takes the same optimizer step and the copies stay equal: N ranks of batch B
// train as one process of batch N * B would (up to the order of float sums).
//
//   ProcessGroup group = ProcessGroup::from_env();
//   train::DataParallel ddp(group);
//   model = ddp.broadcast_parameters(model);
//   data::ClassificationLoader loader(train_set, batcher, ddp.shard({.batch_size = 16, ...}));
//   for (auto& batch : loader.epoch(e)) {
//     Gradients grads = ddp.backward(model, loss_of(model, batch));   // averaged gradients
//     optimizer.step(model, grads, lr);
//   }
//
// or LearnerConfig::data_parallel, which does all of it (kiln/train/learner.h).
//
// Gradients travel in buckets of about options.bucket_bytes (25 MiB, PyTorch DDP's default),
// filled with the parameters in reverse order (the last layers' gradients are ready first), one
// all_reduce(Mean) of the bucket's gradients joined end to end. With options.overlap (the
// default), backward tells the reducer each gradient as soon as it is final
// (BackwardOptions::on_leaf_gradient), and a full bucket is all-reduced on a thread of its own
// while the pass goes on; buckets go out in order, the same on every rank. Without overlap, the
// buckets are all-reduced after the pass. Every trainable parameter ends with a gradient: one that
// a rank's pass did not reach counts as zeros there (a parameter no rank used gets zeros).
// A group of one process reduces nothing: DataParallel then costs nothing.
#pragma once

#include <cstddef>
#include <vector>

#include "kiln/autodiff.h"
#include "kiln/data/loader.h"
#include "kiln/nn/module.h"
#include "kiln/process_group.h"
#include "kiln/tensor.h"

namespace kiln::train {

struct DataParallelOptions {
  // Bytes of gradients per all-reduce (a bucket closes when the next gradient would pass this;
  // a larger gradient has a bucket of its own). InvalidArgument for 0.
  std::size_t bucket_bytes = std::size_t{25} << 20;
  // All-reduce buckets while backward goes on (true) or after it.
  bool overlap = true;
};

namespace detail {

// The non-template work (src/distributed/data_parallel.cpp).
void broadcast_parameters(void* module, nn::detail::VisitFn visit, const ProcessGroup& group);
Gradients data_parallel_backward(const std::vector<Primitive>& params, const Primitive& loss,
                                 const ProcessGroup& group, const DataParallelOptions& options);
void all_reduce_gradients(const std::vector<Primitive>& params, Gradients& grads,
                          const ProcessGroup& group, const DataParallelOptions& options);
void check_options(const DataParallelOptions& options);

}  // namespace detail

class DataParallel {
 public:
  explicit DataParallel(ProcessGroup group, DataParallelOptions options = {})
      : group_(std::move(group)), options_(options) {
    detail::check_options(options_);
  }

  const ProcessGroup& group() const noexcept { return group_; }
  const DataParallelOptions& options() const noexcept { return options_; }
  int rank() const noexcept { return group_.rank(); }
  int world_size() const noexcept { return group_.size(); }

  // model with rank 0's parameters and buffers, on every rank (one broadcast per tensor).
  template <nn::detail::Visitable M>
  M broadcast_parameters(M model) const {
    detail::broadcast_parameters(&model, nn::detail::visit_fn<M>, group_);
    return model;
  }

  // loss.backward(), with the gradients of model's trainable parameters averaged over the ranks.
  template <nn::detail::Visitable M>
  Gradients backward(const M& model, const Tensor<1>& loss) const {
    return detail::data_parallel_backward(trainable(model), loss.primitive(), group_, options_);
  }

  // The same averaging, for gradients a backward pass of the caller's produced (no overlap).
  template <nn::detail::Visitable M>
  void all_reduce_gradients(const M& model, Gradients& grads) const {
    detail::all_reduce_gradients(trainable(model), grads, group_, options_);
  }

  // options for this rank's shard of a loader (DataLoaderOptions::rank and world_size): each
  // batch of batch_size per rank is this rank's part of a global batch world_size times larger.
  data::DataLoaderOptions shard(data::DataLoaderOptions options) const {
    options.rank = static_cast<std::size_t>(rank());
    options.world_size = static_cast<std::size_t>(world_size());
    return options;
  }

 private:
  template <nn::detail::Visitable M>
  static std::vector<Primitive> trainable(const M& model) {
    std::vector<Primitive> params;
    for (const nn::NamedParam& p : nn::named_parameters(model)) {
      if (p.trainable) params.push_back(p.value);
    }
    return params;
  }

  ProcessGroup group_;
  DataParallelOptions options_;
};

}  // namespace kiln::train
