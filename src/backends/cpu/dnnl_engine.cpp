#if KILN_HAVE_DNNL

#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/dnnl_team.h"

namespace kiln::cpu {

const dnnl::engine& dnnl_cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

}  // namespace kiln::cpu

#endif
