// Convolutions on oneDNN's primitives (conv_dnnl.h). A call is cut into tasks over kiln's
// threads: blocks of images, or blocks of channels when there are fewer images than threads.
// Each task runs the primitive on one thread with its own scratchpad and reorders its part of
// the tensors between kiln's plain layout and the primitive's blocked one (a standalone test on
// the 2-core Zen 5, forward 3x3 64->64 at 56x56, batch 16 over two threads: blocked 15.3 ms with
// the reorders, plain NCHW (oneDNN's im2col + gemm) 21.7, channels-last 18.8). Primitives and
// reorders are made once per problem and cached: their creation compiles kernels.
#if KILN_HAVE_DNNL

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backends/cpu/conv_dnnl.h"
#include "backends/cpu/dnnl_team.h"
#include "backends/cpu/parallel.h"

namespace kiln::cpu {

namespace {

using dnnl::memory;
using DnnlDims = memory::dims;

using Pass = ConvPass;  // conv_dnnl.h

// One primitive's problem: the pass, the window, and the part of the tensors one task covers
// (`batch` images, in_slice of the in_channels and out_slice of the out_channels, in `groups`
// groups of in_per_group and out_per_group channels).
struct Problem {
  Pass pass;
  std::int64_t dims;
  std::int64_t batch;
  std::int64_t in_channels, out_channels, in_slice, out_slice;
  std::int64_t groups, in_per_group, out_per_group;
  bool bias;
  Window w;
  bool winograd;  // conv_winograd() when the problem was made: Winograd's algorithm allowed
  bool operator==(const Problem&) const = default;
};

struct ProblemHash {
  std::size_t operator()(const Problem& p) const noexcept {
    std::size_t h = static_cast<std::size_t>(p.pass);
    const auto mix = [&](std::int64_t v) { h = h * 1000003 ^ std::hash<std::int64_t>{}(v); };
    for (std::int64_t v :
         {p.dims, p.batch, p.in_channels, p.out_channels, p.in_slice, p.out_slice, p.groups,
          p.in_per_group, p.out_per_group, std::int64_t{p.bias}, std::int64_t{p.winograd}}) {
      mix(v);
    }
    for (const Dims3* d :
         {&p.w.in, &p.w.out, &p.w.kernel, &p.w.stride, &p.w.padding, &p.w.dilation}) {
      for (std::int64_t v : *d) mix(v);
    }
    return h;
  }
};

// The last `dims` entries of a right-aligned triple.
DnnlDims tail(const Dims3& values, std::int64_t dims) {
  return DnnlDims(values.end() - dims, values.end());
}

// A plain description: `outer` sizes with their strides, then `inner` row-major (the spatial
// dims, whose block is contiguous in kiln's tensors).
memory::desc plain(DnnlDims sizes, DnnlDims strides, const DnnlDims& inner) {
  std::int64_t stride = 1;
  DnnlDims inner_strides(inner.size());
  for (std::size_t d = inner.size(); d-- > 0;) {
    inner_strides[d] = stride;
    stride *= inner[d];
  }
  sizes.insert(sizes.end(), inner.begin(), inner.end());
  strides.insert(strides.end(), inner_strides.begin(), inner_strides.end());
  return memory::desc(sizes, memory::data_type::f32, strides);
}

// Channels [c0, c0 + slice) of `batch` images of a contiguous [images, total, spatial...].
memory::desc activation(const Problem& p, std::int64_t slice, std::int64_t total,
                        const Dims3& spatial) {
  const std::int64_t plane = product3(spatial);
  return plain({p.batch, slice}, {total * plane, plane}, tail(spatial, p.dims));
}

// kiln's weight [out, in / groups, kernel...]: oneDNN's [out_slice, in_slice, kernel...] (a block
// of rows or columns), or [groups, out / groups, in / groups, kernel...] with groups.
memory::desc weights(const Problem& p) {
  const std::int64_t taps = p.w.kernel_size(), in_per_group = p.in_per_group;
  const DnnlDims kernel = tail(p.w.kernel, p.dims);
  if (p.groups > 1) {
    return plain({p.groups, p.out_per_group, in_per_group},
                 {p.out_per_group * in_per_group * taps, in_per_group * taps, taps}, kernel);
  }
  return plain({p.out_slice, p.in_slice}, {in_per_group * taps, taps}, kernel);
}

memory::desc any_layout(const memory::desc& d) {
  return memory::desc(d.dims(), memory::data_type::f32, memory::format_tag::any);
}

// One argument of the primitive: kiln's layout, the primitive's, and the reorder between them
// (user -> inner for inputs, inner -> user for outputs) when they differ.
struct Operand {
  Operand(int arg, bool output, memory::desc user, memory::desc inner)
      : arg(arg), output(output), user(std::move(user)), inner(std::move(inner)) {}
  int arg;
  bool output;
  memory::desc user, inner;
  std::optional<dnnl::reorder> convert;
  memory::desc convert_scratchpad;
  std::size_t offset = 0;  // of the inner copy in the task's staging memory

  // Runs the reorder from -> to on one thread; scratch: at least convert_scratchpad's size.
  void run_convert(dnnl::stream& stream, const memory& from, const memory& to,
                   std::byte* scratch) const {
    std::unordered_map<int, memory> args{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    if (convert_scratchpad.get_size() > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(convert_scratchpad, stream.get_engine(), scratch));
    }
    convert->execute(stream, args);
  }
};

struct Plan {
  dnnl::algorithm algorithm = dnnl::algorithm::convolution_direct;
  dnnl::primitive primitive;
  std::vector<Operand> operands;  // in the order of the pointers run_plan is given
  memory::desc scratchpad;
  std::size_t scratch_bytes = 0;  // the primitive's and the reorders' scratchpads (one at a time)
  std::size_t staging_bytes = 0;  // scratchpads and inner copies
};

constexpr std::size_t kAlignment = 64;
std::size_t aligned(std::size_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

// oneDNN's padding after the data: kiln's symmetric padding where that gives oneDNN's output
// size (its extent check divides as kiln's does), else the exact remainder (a transpose whose
// padding_out exceeds its stride).
DnnlDims padding_after(const Problem& p) {
  DnnlDims out;
  for (std::size_t d = 3 - static_cast<std::size_t>(p.dims); d < 3; ++d) {
    const std::int64_t extent = p.w.dilation[d] * (p.w.kernel[d] - 1) + 1;
    std::int64_t after = p.w.padding[d];
    if ((p.w.in[d] - extent + p.w.padding[d] + after) / p.w.stride[d] + 1 != p.w.out[d]) {
      after = (p.w.out[d] - 1) * p.w.stride[d] + extent - p.w.in[d] - p.w.padding[d];
    }
    out.push_back(after);
  }
  return out;
}

// The primitive of `algorithm` and its reorders for p, or null where oneDNN has none.
std::shared_ptr<const Plan> make_plan(const Problem& p, dnnl::algorithm algorithm) {
  const dnnl::engine& engine = dnnl_cpu_engine();
  const memory::desc src = activation(p, p.in_slice, p.in_channels, p.w.in);
  const memory::desc dst = activation(p, p.out_slice, p.out_channels, p.w.out);
  const memory::desc wei = weights(p);
  DnnlDims dilation = tail(p.w.dilation, p.dims);
  for (auto& d : dilation) d -= 1;  // oneDNN counts the gaps between taps
  const DnnlDims strides = tail(p.w.stride, p.dims), before = tail(p.w.padding, p.dims);
  const DnnlDims after = padding_after(p);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // Kernels are planned for the team size at creation: one thread, as they run.
  SingleThreadedDnnl team;
  auto plan = std::make_shared<Plan>();
  plan->algorithm = algorithm;
  try {
    const auto forward_desc = [&](dnnl::prop_kind kind) {
      if (p.bias) {
        const memory::desc bias({p.out_slice}, memory::data_type::f32, memory::format_tag::x);
        return dnnl::convolution_forward::desc(kind, algorithm, any_layout(src), any_layout(wei),
                                               bias, any_layout(dst), strides, dilation, before,
                                               after);
      }
      return dnnl::convolution_forward::desc(kind, algorithm, any_layout(src), any_layout(wei),
                                             any_layout(dst), strides, dilation, before, after);
    };
    if (p.pass == Pass::kForward) {
      // forward_training, even for inference: oneDNN 2.6 then picks its nChw16c kernel, where
      // for forward_inference it picks brgconv on channels-last, whose reorders from kiln's
      // layout cost more (conv2d bench row on the loaded machine: 21.4-22.2 ms against
      // 26.7-29.7, interleaved).
      const dnnl::convolution_forward::primitive_desc pd(
          forward_desc(dnnl::prop_kind::forward_training), attr, engine);
      plan->primitive = dnnl::convolution_forward(pd);
      plan->scratchpad = pd.scratchpad_desc();
      plan->operands = {{DNNL_ARG_SRC, false, src, pd.src_desc()},
                        {DNNL_ARG_WEIGHTS, false, wei, pd.weights_desc()}};
      if (p.bias) plan->operands.push_back({DNNL_ARG_BIAS, false, pd.bias_desc(), pd.bias_desc()});
      plan->operands.push_back({DNNL_ARG_DST, true, dst, pd.dst_desc()});
    } else {
      const dnnl::convolution_forward::primitive_desc hint(
          forward_desc(dnnl::prop_kind::forward_training), engine);
      if (p.pass == Pass::kInputGrad) {
        const dnnl::convolution_backward_data::primitive_desc pd(
            {algorithm, any_layout(src), any_layout(wei), any_layout(dst), strides, dilation,
             before, after},
            attr, engine, hint);
        plan->primitive = dnnl::convolution_backward_data(pd);
        plan->scratchpad = pd.scratchpad_desc();
        plan->operands = {{DNNL_ARG_DIFF_DST, false, dst, pd.diff_dst_desc()},
                          {DNNL_ARG_WEIGHTS, false, wei, pd.weights_desc()},
                          {DNNL_ARG_DIFF_SRC, true, src, pd.diff_src_desc()}};
      } else {
        const dnnl::convolution_backward_weights::primitive_desc pd(
            {algorithm, any_layout(src), any_layout(wei), any_layout(dst), strides, dilation,
             before, after},
            attr, engine, hint);
        plan->primitive = dnnl::convolution_backward_weights(pd);
        plan->scratchpad = pd.scratchpad_desc();
        plan->operands = {{DNNL_ARG_SRC, false, src, pd.src_desc()},
                          {DNNL_ARG_DIFF_DST, false, dst, pd.diff_dst_desc()},
                          {DNNL_ARG_DIFF_WEIGHTS, true, wei, pd.diff_weights_desc()}};
      }
    }
    // Blocked layouts pad channels to a multiple of 16: where that more than doubles an image's
    // channels (an RGB input's 3), the padding is most of the work and im2col is faster (the
    // input gradient of a ResNet stem, 16x3x224x224 by 64x3x7x7 stride 2: 136-148 ms here
    // against 72-75).
    for (const Operand& o : plan->operands) {
      const bool image = o.arg == DNNL_ARG_SRC || o.arg == DNNL_ARG_DST ||
                         o.arg == DNNL_ARG_DIFF_SRC || o.arg == DNNL_ARG_DIFF_DST;
      if (image && o.inner.data.padded_dims[1] > 2 * o.inner.data.dims[1]) return nullptr;
    }
    // Reorders get user scratchpads too: a library-managed one may be shared between
    // primitives running on different threads.
    std::size_t scratch = plan->scratchpad.get_size();
    for (Operand& o : plan->operands) {
      if (o.user == o.inner) continue;
      const dnnl::reorder::primitive_desc pd =
          o.output ? dnnl::reorder::primitive_desc(engine, o.inner, engine, o.user, attr)
                   : dnnl::reorder::primitive_desc(engine, o.user, engine, o.inner, attr);
      o.convert = dnnl::reorder(pd);
      o.convert_scratchpad = pd.scratchpad_desc();
      scratch = std::max(scratch, o.convert_scratchpad.get_size());
    }
    plan->scratch_bytes = aligned(scratch);
    std::size_t offset = plan->scratch_bytes;
    for (Operand& o : plan->operands) {
      if (!o.convert) continue;
      o.offset = offset;
      offset += aligned(o.inner.get_size());
    }
    plan->staging_bytes = offset;
  } catch (const dnnl::error&) {
    return nullptr;  // unsupported here: the im2col path takes it
  }
  return plan;
}

// Winograd's algorithm where oneDNN has it for p (2-D, 3x3, stride and dilation 1, no groups, a
// CPU with AVX-512), else the direct one. oneDNN's Winograd (F(4x4, 3x3) on 6x6 tiles) does a
// 3x3 convolution's sums in 2.25x fewer multiplications (the 2-core Zen 4 VM, 3x3 64->64 at
// 56x56, batch 16: forward 7.7 ms against 16.8, input gradient 7.5 against 17.1, weight gradient
// 8.0 against 19.0), at a cost in rounding that grows with the channels summed: float64 against
// f32 on [-1, 1) data, the largest |error| / (1 + |value|) of the forward and input gradient at
// 32 / 64 / 128 / 256 / 512 channels 2.2e-5 / 3.8e-5 / 6.3e-5 / 7.9e-5 / 1.5e-4, where direct
// sums give 5e-6 to 1.7e-5; the weight gradient's (a sum over images and positions) within 2x of
// direct's at every width. So the forward and input gradient take it up to kWinogradChannels
// channels summed (the first two stages of a ResNet), the weight gradient at any width. cuDNN's
// algorithms for f32 include Winograd's too (cuda_conv_cudnn.cpp).
constexpr std::int64_t kWinogradChannels = 128;

bool winograd_shape(const Problem& p) {
  const std::int64_t summed = p.pass == Pass::kForward     ? p.in_channels
                              : p.pass == Pass::kInputGrad ? p.out_channels
                                                           : 0;
  return p.dims == 2 && p.groups == 1 && summed <= kWinogradChannels && p.w.kernel[1] == 3 &&
         p.w.kernel[2] == 3 && p.w.stride[1] == 1 && p.w.stride[2] == 1 && p.w.dilation[1] == 1 &&
         p.w.dilation[2] == 1;
}

std::shared_ptr<const Plan> make_plan(const Problem& p) {
  if (p.winograd && winograd_shape(p)) {
    if (auto plan = make_plan(p, dnnl::algorithm::convolution_winograd)) return plan;
  }
  return make_plan(p, dnnl::algorithm::convolution_direct);
}

// Plans by problem, the most recently used kept (each holds compiled kernels).
class PlanCache {
 public:
  // The plan for p (null where oneDNN refuses it, remembered as well).
  std::shared_ptr<const Plan> get(const Problem& p) {
    {
      std::lock_guard lock(mutex_);
      if (auto it = index_.find(p); it != index_.end()) {
        recent_.splice(recent_.begin(), recent_, it->second);
        return it->second->second;
      }
    }
    std::shared_ptr<const Plan> plan = make_plan(p);  // unlocked: compiling takes milliseconds
    std::lock_guard lock(mutex_);
    if (auto it = index_.find(p); it != index_.end()) return it->second->second;
    recent_.emplace_front(p, plan);
    index_.emplace(p, recent_.begin());
    if (recent_.size() > kMaxPlans) {
      index_.erase(recent_.back().first);
      recent_.pop_back();
    }
    return plan;
  }

 private:
  static constexpr std::size_t kMaxPlans = 128;
  using Entry = std::pair<Problem, std::shared_ptr<const Plan>>;
  std::mutex mutex_;
  std::list<Entry> recent_;
  std::unordered_map<Problem, std::list<Entry>::iterator, ProblemHash> index_;
};

PlanCache& plan_cache() {
  static PlanCache cache;
  return cache;
}

// Working memory a thread reuses from call to call: a fresh page costs a fault on its first
// touch (about 15 us per 4 KiB here). Buffers up to kKeptBytes are kept; larger ones, whose
// faults are small beside the work that needs them, are released after each use.
constexpr std::size_t kKeptBytes = std::size_t{64} << 20;

class Staging {
 public:
  void trim() {
    if (size_ > kKeptBytes) {
      data_.reset();
      size_ = 0;
    }
  }
  std::byte* get(std::size_t bytes) {
    if (bytes > size_) {
      data_.reset(static_cast<std::byte*>(std::aligned_alloc(kAlignment, aligned(bytes))));
      size_ = data_ ? aligned(bytes) : 0;
      if (!data_) detail::fail<OutOfMemory>("conv", "cannot allocate ", bytes, " bytes");
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  std::size_t size_ = 0;
};

// A thread's buffers: the primitive's scratchpad and inner copies, weights converted once for
// a call's tasks, and a task's partial weight gradient.
enum class Use { kTask, kSharedWeights, kPartial };
Staging& buffer(Use use) {
  thread_local std::array<Staging, 3> buffers;
  return buffers[static_cast<std::size_t>(use)];
}
std::byte* staging(Use use, std::size_t bytes) { return buffer(use).get(bytes); }

// Runs the plan on kiln's memory at `pointers` (one per operand) on the calling thread;
// `ready_weights`: the weights already in the primitive's layout (null: converted here).
void run_plan(const Plan& plan, std::span<void* const> pointers, const void* ready_weights) {
  const dnnl::engine& engine = dnnl_cpu_engine();
  try {
    dnnl::stream stream(engine);
    std::byte* work = staging(Use::kTask, plan.staging_bytes);
    std::unordered_map<int, memory> args;
    std::vector<std::pair<const Operand*, memory>> outputs;
    if (plan.scratchpad.get_size() > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(plan.scratchpad, engine, work));
    }
    for (std::size_t i = 0; i < plan.operands.size(); ++i) {
      const Operand& o = plan.operands[i];
      memory user(o.user, engine, pointers[i]);
      if (!o.convert) {
        args.emplace(o.arg, user);
      } else if (o.arg == DNNL_ARG_WEIGHTS && ready_weights != nullptr) {
        args.emplace(o.arg, memory(o.inner, engine, const_cast<void*>(ready_weights)));
      } else {
        memory inner(o.inner, engine, work + o.offset);
        if (o.output) {
          outputs.emplace_back(&o, user);
        } else {
          o.run_convert(stream, user, inner, work);
        }
        args.emplace(o.arg, inner);
      }
    }
    plan.primitive.execute(stream, args);
    for (auto& [o, user] : outputs) o->run_convert(stream, args.at(o->arg), user, work);
    stream.wait();
  } catch (const dnnl::error& e) {
    detail::fail<ExecutionError>("conv", "oneDNN failed: ", e.what());
  }
}

// What a call's tasks each take: a block of images, of input or output channels (every image),
// or of groups.
enum class Axis { kImages, kInChannels, kOutChannels, kGroups };

// How a call is cut: `count` tasks over `axis`, `block` channels or groups each (the last may
// have fewer).
struct Cut {
  std::int64_t count = 1;
  Axis axis = Axis::kImages;
  std::int64_t block = 0;
};

// Channel blocks are whole multiples of oneDNN's 16-channel vector blocks.
constexpr std::int64_t kChannelBlock = 16;

// channels: the axis cut when there are fewer images than threads (the output channels of the
// forward and of the weight gradient, whose tasks then own their rows; the input channels of
// the input gradient).
// by_images false: cut over channels or groups even where there are enough images.
Cut cut_for(const Problem& p, Axis channels, bool by_images = true) {
  const double work = static_cast<double>(p.batch) * static_cast<double>(p.out_channels) *
                      static_cast<double>(p.in_per_group) *
                      static_cast<double>(p.w.kernel_size() * p.w.out_size());
  const std::int64_t threads = in_parallel_region() ? 1 : thread_count();
  if (threads <= 1 || work < static_cast<double>(kConvSerialWork)) return {};
  // Several image blocks per thread, handed out as threads come free (parallel.h): a thread
  // that loses its core to another process leaves its blocks to the others.
  if (by_images && p.batch >= threads) {
    return {std::min(p.batch, threads * kPiecesPerThread), Axis::kImages};
  }
  // Otherwise one block per thread of groups, or of channels in vector blocks.
  std::int64_t units = p.groups, unit = 1;
  if (p.groups == 1) {
    unit = kChannelBlock;
    units = ceil_div(channels == Axis::kInChannels ? p.in_channels : p.out_channels, unit);
  }
  if (units < 2) return {};
  const std::int64_t block = ceil_div(units, std::min(threads, units));
  return {ceil_div(units, block), p.groups == 1 ? channels : Axis::kGroups, block * unit};
}

// Task t's problem, the first image and the first input and output channels of its part, and
// the offset of its weights.
struct Part {
  Problem problem;
  std::int64_t image = 0, in_channel = 0, out_channel = 0, weight = 0;
};
Part part_of(const Problem& whole, const Cut& cut, std::int64_t t) {
  Part part{whole};
  Problem& p = part.problem;
  const std::int64_t first = t * cut.block, rows = whole.in_per_group * whole.w.kernel_size();
  switch (cut.axis) {
    case Axis::kImages:
      part.image = whole.batch * t / cut.count;
      p.batch = whole.batch * (t + 1) / cut.count - part.image;
      break;
    case Axis::kInChannels:
      part.in_channel = first;
      p.in_slice = std::min(cut.block, whole.in_channels - first);
      part.weight = first * whole.w.kernel_size();
      break;
    case Axis::kOutChannels:
      part.out_channel = first;
      p.out_slice = std::min(cut.block, whole.out_channels - first);
      part.weight = first * rows;
      break;
    case Axis::kGroups:
      p.groups = std::min(cut.block, whole.groups - first);
      part.in_channel = first * whole.in_per_group;
      part.out_channel = first * whole.out_per_group;
      p.in_slice = p.groups * whole.in_per_group;
      p.out_slice = p.groups * whole.out_per_group;
      part.weight = part.out_channel * rows;
      break;
  }
  return part;
}

// Runs task(part, plan, ready_weights) for each task of the cut over kiln's threads. Weights read
// whole by every task in one layout are converted once, here. Returns false, having run
// nothing, where oneDNN refuses a task's problem.
template <class Task>
bool run_cut(const Problem& whole, const Cut& cut, const float* weight, Task&& task) {
  std::vector<Part> parts;
  std::vector<std::shared_ptr<const Plan>> plans;
  for (std::int64_t t = 0; t < cut.count; ++t) {
    parts.push_back(part_of(whole, cut, t));
    plans.push_back(t > 0 && parts[t].problem == parts[t - 1].problem
                        ? plans.back()
                        : plan_cache().get(parts.back().problem));
    if (!plans.back()) return false;
  }
  const void* ready = nullptr;
  if (weight != nullptr && cut.axis == Axis::kImages) {
    const Operand& first = plans[0]->operands[1];  // the weights, an input of this pass
    const bool shared = std::all_of(plans.begin(), plans.end(), [&](const auto& plan) {
      return plan->operands[1].inner == first.inner;
    });
    if (first.arg == DNNL_ARG_WEIGHTS && first.convert && shared) {
      void* converted = staging(Use::kSharedWeights, first.inner.get_size());
      try {
        SingleThreadedDnnl team;
        dnnl::stream stream(dnnl_cpu_engine());
        memory user(first.user, dnnl_cpu_engine(), const_cast<float*>(weight));
        memory inner(first.inner, dnnl_cpu_engine(), converted);
        first.run_convert(stream, user, inner,
                          staging(Use::kTask, first.convert_scratchpad.get_size()));
        stream.wait();
      } catch (const dnnl::error& e) {
        detail::fail<ExecutionError>("conv", "oneDNN failed: ", e.what());
      }
      ready = converted;
    }
  }
  const int threads = static_cast<int>(std::min<std::int64_t>(thread_count(), cut.count));
  run_tasks(threads, cut.count, [&](std::int64_t t) {
    SingleThreadedDnnl team;
    task(parts[static_cast<std::size_t>(t)], *plans[static_cast<std::size_t>(t)], ready);
    buffer(Use::kTask).trim();
    buffer(Use::kPartial).trim();
  });
  buffer(Use::kSharedWeights).trim();  // after every task: they read it
  return true;
}

Problem whole_problem(Pass pass, const ConvSizes& s, const Window& w, bool bias) {
  const std::int64_t in = s.in_per_group * s.groups, out = s.out_per_group * s.groups;
  return {pass,
          s.spatial_dims,
          s.batch,
          in,
          out,
          in,
          out,
          s.groups,
          s.in_per_group,
          s.out_per_group,
          bias,
          w,
          conv_winograd()};
}

// KILN_CONV_WINOGRAD=0 in the environment: direct sums only.
std::atomic<bool>& winograd_switch() {
  static std::atomic<bool> on{[] {
    const char* value = std::getenv("KILN_CONV_WINOGRAD");
    return value == nullptr || std::string_view(value) != "0";
  }()};
  return on;
}

// Empty tensors (no images, channels or positions) stay with the im2col path, which writes
// what an empty sum gives.
bool has_work(const ConvSizes& s, const Window& w) {
  return s.batch > 0 && s.in_per_group > 0 && s.out_per_group > 0 && w.in_size() > 0 &&
         w.out_size() > 0;
}

}  // namespace

bool conv_winograd() noexcept { return winograd_switch().load(std::memory_order_relaxed); }
void set_conv_winograd(bool on) noexcept { winograd_switch().store(on, std::memory_order_relaxed); }

bool dnnl_conv_runs_winograd(ConvPass pass, const ConvSizes& s, const Window& w) {
  if (!has_work(s, w)) return false;
  const std::shared_ptr<const Plan> plan = plan_cache().get(whole_problem(pass, s, w, false));
  return plan != nullptr && plan->algorithm == dnnl::algorithm::convolution_winograd;
}

bool dnnl_conv_forward(const float* x, const float* weight, const float* bias, float* y,
                       const ConvSizes& s, const Window& w) {
  if (!has_work(s, w)) return false;
  const Problem whole = whole_problem(Pass::kForward, s, w, bias != nullptr);
  const Cut cut = cut_for(whole, Axis::kOutChannels);
  return run_cut(whole, cut, weight, [&](const Part& part, const Plan& plan, const void* ready) {
    std::vector<void*> pointers{
        const_cast<float*>(x + (part.image * whole.in_channels + part.in_channel) * w.in_size()),
        const_cast<float*>(weight + part.weight)};
    if (bias != nullptr) pointers.push_back(const_cast<float*>(bias + part.out_channel));
    pointers.push_back(y + (part.image * whole.out_channels + part.out_channel) * w.out_size());
    run_plan(plan, pointers, ready);
  });
}

bool dnnl_conv_input_grad(const float* weight, const float* dy, float* dx, const ConvSizes& s,
                          const Window& w) {
  if (!has_work(s, w)) return false;
  const Problem whole = whole_problem(Pass::kInputGrad, s, w, false);
  const Cut cut = cut_for(whole, Axis::kInChannels);
  return run_cut(whole, cut, weight, [&](const Part& part, const Plan& plan, const void* ready) {
    const std::array<void*, 3> pointers{
        const_cast<float*>(dy +
                           (part.image * whole.out_channels + part.out_channel) * w.out_size()),
        const_cast<float*>(weight + part.weight),
        dx + (part.image * whole.in_channels + part.in_channel) * w.in_size()};
    run_plan(plan, pointers, ready);
  });
}

// Bytes of the weight gradient's copies (one per block of images) at most.
constexpr std::int64_t kPartialsBytes = std::int64_t{8} << 20;

bool dnnl_conv_weight_grad(const float* x, const float* dy, float* dweight, const ConvSizes& s,
                           const Window& w) {
  if (!has_work(s, w)) return false;
  const Problem whole = whole_problem(Pass::kWeightGrad, s, w, false);
  // Blocks of images each give a whole gradient, summed here; other blocks own their rows.
  // Large gradients are cut over channels instead: their copies would cost more than the
  // images' sharing saves (512x512x3x3 over 8 images of 7x7: 32-34 ms with a copy per block
  // of images, 24 on the im2col path).
  const std::int64_t total = whole.out_channels * s.rows;
  Cut cut = cut_for(whole, Axis::kOutChannels);
  if (cut.axis == Axis::kImages &&
      total * static_cast<std::int64_t>(sizeof(float)) * cut.count > kPartialsBytes) {
    cut = cut_for(whole, Axis::kOutChannels, false);
  }
  const bool partial = cut.axis == Axis::kImages && cut.count > 1;
  std::mutex mutex;
  if (partial) std::fill_n(dweight, total, 0.0f);
  return run_cut(whole, cut, nullptr, [&](const Part& part, const Plan& plan, const void*) {
    float* target = partial ? reinterpret_cast<float*>(staging(
                                  Use::kPartial, static_cast<std::size_t>(total) * sizeof(float)))
                            : dweight + part.weight;
    const std::array<void*, 3> pointers{
        const_cast<float*>(x + (part.image * whole.in_channels + part.in_channel) * w.in_size()),
        const_cast<float*>(dy +
                           (part.image * whole.out_channels + part.out_channel) * w.out_size()),
        target};
    run_plan(plan, pointers, nullptr);
    if (!partial) return;
    std::lock_guard lock(mutex);
    for (std::int64_t i = 0; i < total; ++i) dweight[i] += target[i];
  });
}

}  // namespace kiln::cpu

#endif  // KILN_HAVE_DNNL
