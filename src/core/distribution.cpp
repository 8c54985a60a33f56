#include "kiln/distribution.h"

#include <cmath>

#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln {

using detail::fail;

void Distribution::check(std::string_view op) const {
  switch (kind) {
    case Kind::Default:
      return;
    case Kind::Uniform:
      if (!std::isfinite(a) || !std::isfinite(b)) {
        fail<InvalidArgument>(op, "uniform bounds ", a, " and ", b, " must be finite");
      }
      if (a > b) fail<InvalidArgument>(op, "uniform low ", a, " is greater than high ", b);
      // Samples are low + (high - low) * u: a width past the largest double would give inf.
      if (!std::isfinite(b - a)) {
        fail<InvalidArgument>(op, "uniform width ", b, " - ", a, " is beyond the largest double");
      }
      return;
    case Kind::Normal:
      if (!std::isfinite(a)) fail<InvalidArgument>(op, "normal mean ", a, " must be finite");
      if (!(b >= 0.0) || !std::isfinite(b)) {
        fail<InvalidArgument>(op, "normal standard deviation ", b, " must be a finite number >= 0");
      }
      return;
    case Kind::Bernoulli:
      if (!(a >= 0.0 && a <= 1.0)) {
        fail<InvalidArgument>(op, "bernoulli probability ", a, " is not in [0, 1]");
      }
      return;
  }
  fail<InvalidArgument>(op, "unknown distribution kind ", static_cast<int>(kind));
}

Distribution Distribution::uniform(double low, double high) {
  const Distribution d{Kind::Uniform, low, high};
  d.check("Distribution::uniform");
  return d;
}

Distribution Distribution::normal(double mean, double std) {
  const Distribution d{Kind::Normal, mean, std};
  d.check("Distribution::normal");
  return d;
}

Distribution Distribution::bernoulli(double probability) {
  const Distribution d{Kind::Bernoulli, probability, 0};
  d.check("Distribution::bernoulli");
  return d;
}

}  // namespace kiln
