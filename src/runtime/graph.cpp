// capture() and Graph (kiln/graph.h): a Session open on the calling thread while the region
// runs, the device's own recording around it, the fusion decorator's pending work flushed on
// both sides so the region's lazy ops run inside it.
#include "kiln/graph.h"

#include "decorators/capture/session.h"
#include "kiln/detail/format.h"
#include "runtime/registry.h"

namespace kiln {

using kiln::detail::fail;

namespace {

// Runs every pending lazy op of device's hardware, on its fused chain (which autodiff<fusion<>>
// shares) and on device's own.
void flush_pending(const Device& device, const Device& hardware) {
  chain_backend_for(hardware.fused()).flush();
  chain_backend_for(device).flush();
}

}  // namespace

bool capture_open() noexcept { return capturing::Session::active() != nullptr; }

std::int64_t graphs_alive() noexcept { return capturing::Recording::alive(); }

Graph capture(Device device, const std::function<void()>& region) {
  if (!region) fail<InvalidArgument>("capture", "the region to capture is empty");
  if (capturing::Session::active() != nullptr) {
    fail<InvalidArgument>("capture",
                          "a capture is already open on this thread; captures do not "
                          "nest");
  }
  const Device hardware = device.without_autodiff().without_fusion();
  settings_for(hardware);
  flush_pending(device, hardware);
  std::shared_ptr<capturing::Recording> recording =
      capturing::record_region(chain_backend_for(hardware), hardware, [&] {
        region();
        flush_pending(device, hardware);
      });
  return Graph(std::move(recording));
}

void Graph::replay() const {
  if (recording_ == nullptr) fail<InvalidArgument>("Graph::replay", "the graph is empty");
  if (capturing::Session::active() != nullptr) {
    fail<InvalidArgument>("Graph::replay",
                          "cannot replay a graph while a capture is open on "
                          "this thread");
  }
  // Lazy ops recorded since may read what the replay overwrites: they run first.
  flush_pending(recording_->device, recording_->device);
  for (const auto& hook : recording_->hooks) hook(true);
  if (recording_->device_graph) {
    recording_->device_graph->launch();
    return;
  }
  recording_->replay(hardware_backend_for(recording_->device));
}

namespace detail {

Primitive capture_host_values(const Device& device, DType dtype, std::int64_t count,
                              std::function<std::vector<double>(bool replay)> values) {
  capturing::Session* session = capturing::Session::active();
  if (session == nullptr) {
    fail<InvalidArgument>("capture_host_values", "no capture is open on this thread");
  }
  const Device hardware = device.without_autodiff().without_fusion();
  Backend& backend = chain_backend_for(hardware);
  Primitive tensor;
  {
    const capturing::Session::Pause pause;
    tensor = backend.empty(Shape{count}, dtype, hardware);
  }
  auto write = [tensor, hardware, dtype, count, values](bool replay) {
    std::vector<double> numbers = values(replay);
    if (static_cast<std::int64_t>(numbers.size()) != count) {
      fail<InvalidArgument>("capture_host_values", "gave ", numbers.size(), " values for ", count);
    }
    Backend& on = chain_backend_for(hardware);
    Primitive data = on.from_data(TensorData::from_vec(std::move(numbers), {count}), hardware);
    if (dtype != DType::F64) data = on.cast(std::move(data), dtype);
    on.assign(tensor, std::move(data));
  };
  if (!session->device_records()) {
    const capturing::Session::Pause pause;
    write(false);
  }
  session->add_hook(std::move(write));
  return tensor;
}

}  // namespace detail

Device Graph::device() const {
  if (recording_ == nullptr) fail<InvalidArgument>("Graph::device", "the graph is empty");
  return recording_->device;
}

std::size_t Graph::node_count() const {
  return recording_ == nullptr ? 0 : recording_->steps.size();
}

bool Graph::on_device() const { return recording_ != nullptr && recording_->device_graph; }

std::string Graph::to_string() const {
  return recording_ == nullptr ? std::string("(empty graph)\n") : recording_->describe();
}

}  // namespace kiln
