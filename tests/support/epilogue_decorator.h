// A fusion decorator of a test's own over a device's backend that says it runs reductions'
// epilogues in their kernels (Backend::fuses_reduction_epilogues), records every op (as on CUDA)
// and keeps each program it is handed: the grouping of a reduction with the ops on its result,
// checked on the CPU and, whatever the default, on the GPU.
#pragma once

#include <kiln/kiln.h>

#include <memory>
#include <string>
#include <vector>

#include "contract/forwarding.h"
#include "contract/fused_program.h"
#include "decorators/fusion/fusion_backend.h"
#include "runtime/registry.h"

namespace kiln::test {

class EpilogueRecording final : public ForwardingBackend {
 public:
  // (The registry's backend, not owned.)
  explicit EpilogueRecording(Backend& inner)
      : ForwardingBackend(std::shared_ptr<Backend>(std::shared_ptr<void>(), &inner)) {}
  bool fuses_reduction_epilogues() const override { return true; }
  std::int64_t min_fused_elements() const override { return 1; }
  std::vector<Primitive> run_fused(const FusedProgram& program) override {
    programs.push_back(program);
    return inner().run_fused(program);
  }
  std::vector<FusedProgram> programs;
};

struct EpilogueDecorator {
  explicit EpilogueDecorator(const Device& device)
      : recording(std::make_shared<EpilogueRecording>(backend_for(device))),
        decorator(fusion::make_fusion_backend(recording)) {}

  std::shared_ptr<EpilogueRecording> recording;
  std::shared_ptr<fusion::FusionPassthrough> decorator;
  fusion::FusionPassthrough& fusion = *decorator;
  Backend& b = fusion;  // the ops through the vtable, as the tensor layer calls them

  std::vector<FusedProgram>& programs() { return recording->programs; }
  std::vector<double> read(const Primitive& p) { return b.into_data(p).get().to_f64_vec(); }
};

// The steps' op names of a program, in order.
inline std::vector<std::string> ops_of(const FusedProgram& program) {
  std::vector<std::string> names;
  for (const FusedStep& step : program.steps) names.emplace_back(op_info(step.op).name);
  return names;
}

}  // namespace kiln::test
