#include "kiln/nn/init.h"

#include <cmath>

#include "kiln/detail/format.h"

namespace kiln::nn {

namespace {
thread_local int skip_init_depth = 0;
}  // namespace

SkipInit::SkipInit() noexcept { ++skip_init_depth; }
SkipInit::~SkipInit() { --skip_init_depth; }
bool SkipInit::active() noexcept { return skip_init_depth > 0; }

std::int64_t Initializer::fan_in_of(const Shape& shape) {
  if (shape.rank() < 2) return shape.rank() == 1 ? shape[0] : 1;
  std::int64_t receptive = 1;
  for (std::size_t d = 2; d < shape.rank(); ++d) receptive *= shape[d];
  return shape[1] * receptive;
}

std::int64_t Initializer::fan_out_of(const Shape& shape) {
  if (shape.rank() < 2) return shape.rank() == 1 ? shape[0] : 1;
  std::int64_t receptive = 1;
  for (std::size_t d = 2; d < shape.rank(); ++d) receptive *= shape[d];
  return shape[0] * receptive;
}

Primitive Initializer::make(const Shape& shape, std::int64_t fan_in, std::int64_t fan_out,
                            const Device& device) const {
  const char* op = "Initializer::init";
  auto fan_check = [&](std::int64_t fan, const char* what) {
    if (fan <= 0) {
      kiln::detail::fail<InvalidArgument>(op, what, " is ", fan, " for shape ", shape.to_string(),
                                          "; it must be positive");
    }
    return static_cast<double>(fan);
  };
  // Under SkipInit every branch checks its arguments as usual and then allocates only.
  const bool skip = SkipInit::active();
  auto allocated = [&] {
    return kiln::detail::empty(shape, std::nullopt, device, kiln::Kind::Float);
  };
  auto random = [&](Distribution d) {
    return skip ? allocated()
                : kiln::detail::random(shape, d, std::nullopt, device, kiln::Kind::Float);
  };
  switch (kind_) {
    case Kind::Constant:
      return skip ? allocated()
                  : kiln::detail::full(shape, a_, std::nullopt, device, kiln::Kind::Float);
    case Kind::Uniform:
      if (!(a_ <= b_)) kiln::detail::fail<InvalidArgument>(op, "uniform bounds ", a_, " > ", b_);
      return random(Distribution::uniform(a_, b_));
    case Kind::Normal:
      if (!(b_ >= 0)) kiln::detail::fail<InvalidArgument>(op, "normal std ", b_, " < 0");
      return random(Distribution::normal(a_, b_));
    case Kind::KaimingUniform: {
      const double bound = a_ * std::sqrt(3.0 / fan_check(fan_in, "fan_in"));
      return random(Distribution::uniform(-bound, bound));
    }
    case Kind::KaimingNormal:
      return random(Distribution::normal(0.0, a_ / std::sqrt(fan_check(fan_in, "fan_in"))));
    case Kind::XavierUniform: {
      const double fans = fan_check(fan_in, "fan_in") + fan_check(fan_out, "fan_out");
      const double bound = a_ * std::sqrt(6.0 / fans);
      return random(Distribution::uniform(-bound, bound));
    }
    case Kind::XavierNormal: {
      const double fans = fan_check(fan_in, "fan_in") + fan_check(fan_out, "fan_out");
      return random(Distribution::normal(0.0, a_ * std::sqrt(2.0 / fans)));
    }
  }
  kiln::detail::fail<InvalidArgument>(op, "unknown initializer");
}

}  // namespace kiln::nn
