// The host-fallback table names real REQUIRED ops of ops.def, each once (runs without a GPU).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "backend/op_code.h"
#include "backends/cuda/host_fallback.h"

using namespace kiln;

TEST(GpuFallbackTable, NamesRequiredOpsOnce) {
  std::set<std::string_view> seen;
  for (std::string_view name : cuda::kHostFallbackOps) {
    EXPECT_TRUE(seen.insert(name).second) << name << " listed twice";
    bool found = false;
    for (const OpInfo& op : all_ops()) {
      if (op.name != name) continue;
      found = true;
      EXPECT_EQ(op.availability, OpAvailability::Required)
          << name << " has a default: it needs no host fallback";
    }
    EXPECT_TRUE(found) << name << " is not an op of ops.def";
  }
}
