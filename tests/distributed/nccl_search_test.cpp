// Where the CUDA plugin looks for NCCL (src/backends/cuda/library_search.h), on a fake system that
// records what is asked of it: the places in their order, KILN_NCCL_LIBRARY and KILN_NCCL=0, a
// library without a symbol or refused by the caller, python3 asked only when nothing else
// served, and the reason given when nothing loads. No GPU and no NCCL needed; a few cases use
// the real system with files that cannot be NCCL.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backends/cuda/library_search.h"
#include "support/fake_library_system.h"

namespace kiln {
namespace {

using cuda::search::Found;
using cuda::search::System;

constexpr const char* kNames[] = {"ncclGetVersion", "ncclAllReduce"};

using FakeSystem = test::FakeLibrarySystem;
using test::accept_all;
using test::expect_in_order;

Found search(FakeSystem& fake,
             const std::function<std::string(const std::vector<void*>&)>& accept = accept_all) {
  return cuda::search::find_library(cuda::search::kNccl, fake.system(), kNames, accept);
}

TEST(NcclSearch, NothingFoundNamesEveryPlaceInOrderAndWhatToDo) {
  FakeSystem fake;
  const Found found = search(fake);
  EXPECT_EQ(found.library, nullptr);
  // Only the bare name goes to the loader; the paths that do not exist are not opened.
  EXPECT_EQ(fake.opened, std::vector<std::string>{"libnccl.so.2"});
  EXPECT_EQ(fake.python_calls, 1);
  expect_in_order(found.reason,
                  {"no usable libnccl.so.2", "libnccl.so.2: libnccl.so.2: cannot open",
                   "/usr/local/cuda/lib64/libnccl.so.2: no such file",
                   "/usr/local/cuda/lib/libnccl.so.2: no such file",
                   "/site/a/nvidia/nccl/lib/libnccl.so.2: no such file",
                   "/site/b/nvidia/nccl/lib/libnccl.so.2: no such file", "KILN_NCCL_LIBRARY"});
}

TEST(NcclSearch, CudaHomeComesBeforeTheUsualToolkitDirectory) {
  FakeSystem fake;
  fake.variables["CUDA_HOME"] = "/opt/cuda";
  fake.libraries = {"/opt/cuda/lib/libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"};
  const Found found = search(fake);
  EXPECT_EQ(found.path, "/opt/cuda/lib/libnccl.so.2");
  EXPECT_EQ(fake.opened, (std::vector<std::string>{"libnccl.so.2", "/opt/cuda/lib/libnccl.so.2"}));
  EXPECT_EQ(fake.python_calls, 0);
  // A CUDA_HOME that is the usual directory is tried once.
  fake.variables["CUDA_HOME"] = "/usr/local/cuda";
  fake.libraries.clear();
  const std::string reason = search(fake).reason;
  const std::string once = "/usr/local/cuda/lib64/libnccl.so.2";
  ASSERT_NE(reason.find(once), std::string::npos) << reason;
  EXPECT_EQ(reason.find(once, reason.find(once) + 1), std::string::npos) << reason;
}

TEST(NcclSearch, TheLoadersOwnFindComesFirstAndPythonIsNotAsked) {
  FakeSystem fake;
  fake.libraries = {"libnccl.so.2", "/site/a/nvidia/nccl/lib/libnccl.so.2"};
  const Found found = search(fake);
  EXPECT_EQ(found.path, "libnccl.so.2");
  ASSERT_EQ(found.symbols.size(), 2u);
  EXPECT_NE(found.symbols[0], nullptr);
  EXPECT_TRUE(found.reason.empty());
  EXPECT_EQ(fake.python_calls, 0);
}

TEST(NcclSearch, PyTorchsWheelIsTheLastPlace) {
  FakeSystem fake;
  fake.libraries = {"/site/b/nvidia/nccl/lib/libnccl.so.2"};
  const Found found = search(fake);
  EXPECT_EQ(found.path, "/site/b/nvidia/nccl/lib/libnccl.so.2");
  EXPECT_NE(found.library, nullptr);
  EXPECT_EQ(fake.python_calls, 1);
}

TEST(NcclSearch, KilnNcclLibraryIsTheOnlyPlaceTried) {
  FakeSystem fake;
  fake.variables["KILN_NCCL_LIBRARY"] = "/mine/libnccl.so.2";
  fake.libraries = {"libnccl.so.2"};
  const Found missing = search(fake);
  EXPECT_EQ(missing.library, nullptr);
  EXPECT_TRUE(fake.opened.empty());
  EXPECT_EQ(fake.python_calls, 0);
  expect_in_order(missing.reason, {"/mine/libnccl.so.2: no such file", "KILN_NCCL_LIBRARY"});

  fake.libraries.push_back("/mine/libnccl.so.2");
  const Found found = search(fake);
  EXPECT_EQ(found.path, "/mine/libnccl.so.2");
  EXPECT_EQ(fake.opened, std::vector<std::string>{"/mine/libnccl.so.2"});
}

TEST(NcclSearch, KilnNcclZeroTurnsItOff) {
  FakeSystem fake;
  fake.variables["KILN_NCCL"] = "0";
  fake.variables["KILN_NCCL_LIBRARY"] = "/mine/libnccl.so.2";
  fake.libraries = {"libnccl.so.2", "/mine/libnccl.so.2"};
  const Found found = search(fake);
  EXPECT_EQ(found.library, nullptr);
  EXPECT_TRUE(fake.opened.empty());
  EXPECT_EQ(fake.python_calls, 0);
  EXPECT_NE(found.reason.find("KILN_NCCL=0"), std::string::npos) << found.reason;
  // Any other value leaves it on.
  fake.variables["KILN_NCCL"] = "1";
  EXPECT_EQ(search(fake).path, "/mine/libnccl.so.2");
}

TEST(NcclSearch, ALibraryWithoutASymbolOrRefusedIsPassedOver) {
  FakeSystem fake;
  fake.libraries = {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2",
                    "/usr/local/cuda/lib/libnccl.so.2"};
  fake.missing = {"libnccl.so.2 ncclAllReduce"};
  int checked = 0;
  const Found found = search(fake, [&](const std::vector<void*>& symbols) -> std::string {
    EXPECT_EQ(symbols.size(), 2u);
    return ++checked == 1 ? "NCCL 2.12.0 is older than 2.13.0" : "";
  });
  EXPECT_EQ(found.path, "/usr/local/cuda/lib/libnccl.so.2");
  EXPECT_EQ(checked, 2);

  fake.libraries = {"libnccl.so.2"};
  const Found none = search(fake);
  expect_in_order(none.reason, {"libnccl.so.2: has no ncclAllReduce"});
}

TEST(NcclSearch, APythonThatFailsIsNamed) {
  FakeSystem fake;
  fake.python_error = "there is no python3 on PATH";
  const Found found = search(fake);
  EXPECT_EQ(found.library, nullptr);
  expect_in_order(found.reason, {"/usr/local/cuda/lib/libnccl.so.2: no such file",
                                 "PyTorch's wheel: there is no python3 on PATH"});
}

// The real system: a KILN_NCCL_LIBRARY that is missing, or not a library, is reported as the
// loader sees it (no NCCL is loaded by these cases).
TEST(NcclSearch, TheRealSystemReportsWhatTheLoaderSays) {
  FakeSystem fake;  // for the variables only
  System real = System::real();
  real.environment = fake.system().environment;
  fake.variables["KILN_NCCL_LIBRARY"] = "/nonexistent/kiln/libnccl.so.2";
  const Found missing = cuda::search::find_library(cuda::search::kNccl, real, kNames, accept_all);
  EXPECT_EQ(missing.library, nullptr);
  expect_in_order(missing.reason, {"/nonexistent/kiln/libnccl.so.2: no such file"});

  const std::string junk = ::testing::TempDir() + "kiln_not_a_library.so";
  std::ofstream(junk) << "not an ELF file";
  fake.variables["KILN_NCCL_LIBRARY"] = junk;
  const Found refused = cuda::search::find_library(cuda::search::kNccl, real, kNames, accept_all);
  EXPECT_EQ(refused.library, nullptr);
  expect_in_order(refused.reason, {junk + ": ", "KILN_NCCL_LIBRARY"});
  EXPECT_EQ(refused.reason.find("no such file"), std::string::npos) << refused.reason;
  std::filesystem::remove(junk);
}

TEST(NcclSearch, TheRealPythonListsItsSitePackages) {
  std::string error;
  const std::vector<std::string> sites = System::real().python_site_packages(error);
  if (sites.empty() && error == "there is no python3 on PATH") GTEST_SKIP() << error;
  ASSERT_FALSE(sites.empty()) << error;
  for (const std::string& site : sites) EXPECT_EQ(site.front(), '/') << site;
}

}  // namespace
}  // namespace kiln
