// Where the CUDA plugin looks for cuDNN (src/backends/cuda/library_search.h, kCudnn): the same
// search as NCCL's with cuDNN's file, variables and wheel, on the fake system; then the real
// system: where this machine has a libcudnn.so.9, it must export every function kiln declares
// (src/backends/cuda/lib/cudnn_api.h) and be cuDNN 9. No GPU needed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/cuda/lib/cudnn_api.h"
#include "backends/cuda/library_search.h"
#include "support/fake_library_system.h"

namespace kiln {
namespace {

using cuda::search::Found;
using cuda::search::kCudnn;
using test::accept_all;
using test::expect_in_order;
using test::FakeLibrarySystem;

Found search(FakeLibrarySystem& fake) {
  return cuda::search::find_library(kCudnn, fake.system(), cuda::cudnn::kSymbols, accept_all);
}

TEST(CudnnSearch, NothingFoundNamesCudnnsPlacesAndWhatToDo) {
  FakeLibrarySystem fake;
  const Found found = search(fake);
  EXPECT_EQ(found.library, nullptr);
  EXPECT_EQ(fake.opened, std::vector<std::string>{"libcudnn.so.9"});
  expect_in_order(found.reason,
                  {"no usable libcudnn.so.9", "/usr/local/cuda/lib64/libcudnn.so.9: no such file",
                   "/site/a/nvidia/cudnn/lib/libcudnn.so.9: no such file",
                   "/site/b/nvidia/cudnn/lib/libcudnn.so.9: no such file", "install cuDNN 9",
                   "KILN_CUDNN_LIBRARY"});
}

TEST(CudnnSearch, PyTorchsCudnnWheelIsFound) {
  FakeLibrarySystem fake;
  // NCCL's wheel beside it is no cuDNN.
  fake.libraries = {"/site/a/nvidia/nccl/lib/libnccl.so.2",
                    "/site/b/nvidia/cudnn/lib/libcudnn.so.9"};
  const Found found = search(fake);
  EXPECT_EQ(found.path, "/site/b/nvidia/cudnn/lib/libcudnn.so.9");
  EXPECT_EQ(found.symbols.size(), std::size(cuda::cudnn::kSymbols));
}

TEST(CudnnSearch, KilnCudnnLibraryAndKilnCudnnZero) {
  FakeLibrarySystem fake;
  fake.libraries = {"libcudnn.so.9", "/mine/libcudnn.so.9"};
  fake.variables["KILN_CUDNN_LIBRARY"] = "/mine/libcudnn.so.9";
  EXPECT_EQ(search(fake).path, "/mine/libcudnn.so.9");
  // NCCL's variables do not move cuDNN's search.
  fake.variables.clear();
  fake.variables["KILN_NCCL"] = "0";
  fake.variables["KILN_NCCL_LIBRARY"] = "/mine/libcudnn.so.9";
  EXPECT_EQ(search(fake).path, "libcudnn.so.9");

  fake.variables["KILN_CUDNN"] = "0";
  fake.opened.clear();
  const Found off = search(fake);
  EXPECT_EQ(off.library, nullptr);
  EXPECT_TRUE(fake.opened.empty());
  EXPECT_EQ(off.reason, "KILN_CUDNN=0 turns cuDNN off");
}

TEST(CudnnSearch, ALibraryWithoutAFunctionKilnCallsIsPassedOver) {
  FakeLibrarySystem fake;
  fake.libraries = {"libcudnn.so.9", "/usr/local/cuda/lib64/libcudnn.so.9"};
  fake.missing = {"libcudnn.so.9 cudnnConvolutionBackwardFilter"};
  EXPECT_EQ(search(fake).path, "/usr/local/cuda/lib64/libcudnn.so.9");
  fake.libraries.pop_back();
  expect_in_order(search(fake).reason,
                  {"libcudnn.so.9: has no cudnnConvolutionBackwardFilter (cuDNN too old, or not "
                   "cuDNN)"});
}

// This machine's cuDNN, where it has one: every declared function resolves and the version is
// the one declared. Loads the library (which needs no GPU) and calls only cudnnGetVersion.
TEST(CudnnSearch, TheRealCudnnHasEveryFunctionKilnDeclares) {
  std::size_t version = 0;
  const Found found =
      cuda::search::find_library(kCudnn, cuda::search::System::real(), cuda::cudnn::kSymbols,
                                 [&](const std::vector<void*>& symbols) {
                                   version = cuda::cudnn::bind(symbols).get_version();
                                   return cuda::cudnn::refuse_version(version);
                                 });
  if (found.library == nullptr) {
    // A library that opened but lacks a function, or is another version, fails; none skips.
    ASSERT_EQ(found.reason.find(": has no "), std::string::npos) << found.reason;
    ASSERT_EQ(version, 0u) << found.reason;
    GTEST_SKIP() << found.reason;
  }
  ASSERT_EQ(found.symbols.size(), std::size(cuda::cudnn::kSymbols));
  for (void* symbol : found.symbols) EXPECT_NE(symbol, nullptr);
  EXPECT_EQ(version / 10000, cuda::cudnn::kMajor) << cuda::cudnn::version_text(version);
}

}  // namespace
}  // namespace kiln
