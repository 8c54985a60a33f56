// The contract fingerprint (src/contract/contract.h) depends on every entry of ops.def, so a
// plugin built against a list with any op added, removed or changed is refused at load.
#include "contract/contract.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "runtime/cuda_plugin.h"

namespace kiln {
namespace {

// The entries as the fingerprint sees them.
std::vector<std::string> entries() {
  std::vector<std::string> list;
#define KILN_OP(name, group, kinds, result, parameters, arguments, availability, impl, form, amp) \
  list.push_back(#name " " #kinds " " #result " " #parameters " " #availability ";");
#include "kiln/detail/ops.def"
#undef KILN_OP
  return list;
}

std::uint64_t fingerprint(const std::vector<std::string>& list, int table_revision) {
  std::uint64_t hash = detail::fnv1a(14695981039346656037ULL, "kiln backend contract");
  hash = detail::fnv1a(hash, static_cast<std::uint64_t>(table_revision));
  for (const std::string& entry : list) hash = detail::fnv1a(hash, entry);
  return hash;
}

TEST(Contract, FingerprintChangesWithAnyEntry) {
  const std::vector<std::string> list = entries();
  ASSERT_EQ(fingerprint(list, kPluginTableRevision), kBackendContractHash);
  std::set<std::uint64_t> seen{kBackendContractHash};
  for (std::size_t i = 0; i < list.size(); ++i) {
    std::vector<std::string> dropped = list;
    dropped.erase(dropped.begin() + static_cast<std::ptrdiff_t>(i));
    EXPECT_TRUE(seen.insert(fingerprint(dropped, kPluginTableRevision)).second)
        << "without " << list[i];
    std::vector<std::string> changed = list;
    changed[i] += " ";
    EXPECT_TRUE(seen.insert(fingerprint(changed, kPluginTableRevision)).second)
        << "changed " << list[i];
  }
  EXPECT_NE(fingerprint(list, kPluginTableRevision + 1), kBackendContractHash);
}

TEST(Contract, NameIsSixteenHexDigits) {
  EXPECT_EQ(contract_name(0), "0000000000000000");
  EXPECT_EQ(contract_name(0xfedcba9876543210ULL), "fedcba9876543210");
  EXPECT_EQ(contract_name(kBackendContractHash).size(), 16u);
}

}  // namespace
}  // namespace kiln
