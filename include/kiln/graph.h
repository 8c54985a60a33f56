// Capture and replay: the ops a region runs on one device, recorded once and run again without
// the host work of calling them (on cuda: one CUDA graph launch; on the CPU: the recorded ops
// run directly on the hardware backend, without the tensor layer's checks or the decorators).
//
//   auto x = Tensor<2>::zeros({128, 784}, dev);      // a static input: made before the region
//   Tensor<1> loss;
//   Graph step = capture(dev, [&] { loss = train_step(model, x, labels); });  // records, runs once
//   x.assign(next_batch);                               // new values in x's own storage
//   step.replay();                                      // the same ops on x's new values
//   float l = loss.into_scalar<float>();                // loss's storage holds the new value
//
// What a region reads that it did not make (x, parameters, optimizer state) is read at each
// replay as it is then: change it with Tensor::assign, never by making a new tensor (a new tensor
// is not what the graph reads). What the region made and is still held when capture returns
// (loss, a tensor the region assigned to an outer variable) is written in place by each replay;
// what it made and dropped is not kept. Scalars, shapes and every other argument are fixed at
// capture; an optimizer's learning rate and step counts are not (kiln/optim/optimizer.h).
//
// Refused at capture with InvalidArgument naming the op: reads to the host (into_data, item),
// ops whose result's shape depends on values (argwhere, mask_select), moves between devices,
// and on cuda from_data (host data). Random values (dropout) are drawn afresh before each replay,
// from the device's stream in the order eager steps would draw them. Ops on
// other devices inside the region run once and are not part of the graph. Captures do not nest,
// and one capture records the thread that calls capture() alone.
//
// Optimizers update parameters and their state in place while a capture is open, so a
// replayed training step trains (kiln/optim/optimizer.h says which settings allow it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/device.h"
#include "kiln/primitive.h"

namespace kiln {

namespace capturing {
struct Recording;
}

class Graph {
 public:
  // No region: replay() throws InvalidArgument.
  Graph() = default;

  // Runs the recorded ops again, on the current values of the tensors the region read, and
  // writes the results into the tensors it left held. Asynchronous like any op: read a result
  // to wait. InvalidArgument on an empty Graph or inside another capture.
  void replay() const;

  bool empty() const noexcept { return recording_ == nullptr; }
  // The device the region was captured on (without decorator flags).
  Device device() const;
  // How many ops (fused groups counting one) the region ran on its device.
  std::size_t node_count() const;
  // Whether a replay is one launch of the device's own graph (cuda) rather than the recorded ops
  // run one by one (the CPU).
  bool on_device() const;
  // The recorded steps, one per line ("%4 = add(%1, %3) f32 [128, 512]").
  std::string to_string() const;

 private:
  friend Graph capture(Device device, const std::function<void()>& region);
  explicit Graph(std::shared_ptr<const capturing::Recording> recording)
      : recording_(std::move(recording)) {}

  std::shared_ptr<const capturing::Recording> recording_;
};

// Whether a capture is open on the calling thread (inside a region capture() is running).
bool capture_open() noexcept;
// How many captured graphs exist (optimizers update in place while any does, so a graph and the
// module it trains keep sharing their tensors).
std::int64_t graphs_alive() noexcept;

namespace detail {
// For code running inside a region that needs numbers a replay must take afresh from the host (an
// optimizer's learning rate and bias corrections): a rank-1 tensor of count values of dtype on
// device's hardware, made outside the recording (a replay reads it as an input). values(false)
// gives its contents for the region's run at capture, values(true) before each replay (where the
// caller advances its own counters). InvalidArgument outside a capture.
Primitive capture_host_values(const Device& device, DType dtype, std::int64_t count,
                              std::function<std::vector<double>(bool replay)> values);
}  // namespace detail

// Runs region once, recording the ops it runs on device's hardware (whatever its decorator flags:
// autodiff's backward passes and fused groups are recorded as they run), and returns them as a
// Graph. Work pending on the device before the call runs first, outside the graph. If region
// throws, nothing is kept and the exception propagates.
Graph capture(Device device, const std::function<void()>& region);

}  // namespace kiln
