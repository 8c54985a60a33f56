// Devices: parsing KILN_DEVICE, counts, the backend behind a device, dtype usage, and the
// once-only device settings. Settings are fixed at a device's first use for the whole process,
// so those tests run in a fresh process (support/fresh_process.h).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "runtime/cuda_plugin.h"
#include "support/fresh_process.h"
#include "support/scoped_env.h"

namespace kiln {
namespace {

template <class E, class F>
std::string expect_error(F&& f) {
  try {
    f();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "wrong exception type: " << error.what();
  }
  return {};
}

using test::ScopedEnv;

class ScopedDeviceEnv : public ScopedEnv {
 public:
  explicit ScopedDeviceEnv(const char* value) : ScopedEnv("KILN_DEVICE", value) {}
};

TEST(Device, CpuValue) {
  const Device cpu = Device::cpu();
  EXPECT_EQ(cpu.kind(), DeviceKind::Cpu);
  EXPECT_EQ(cpu.index(), 0);
  EXPECT_FALSE(cpu.is_autodiff());
  EXPECT_TRUE(cpu.autodiff().is_autodiff());
  EXPECT_NE(cpu, cpu.autodiff());
  EXPECT_TRUE(cpu.same_hardware(cpu.autodiff()));
  EXPECT_EQ(cpu.autodiff().without_autodiff(), cpu);
  EXPECT_EQ(cpu.to_string(), "cpu");
  EXPECT_EQ(cpu.url(), "");
}

TEST(Device, DefaultIsTheFirstGpuElseCpuWithoutEnv) {
  const Device expected = cuda_device_count(nullptr) > 0 ? Device::cuda(0) : Device::cpu();
  ScopedEnv fusion("KILN_FUSION", nullptr);
  ScopedDeviceEnv env(nullptr);
  EXPECT_EQ(Device::default_device(), expected.fused());
  ScopedDeviceEnv empty("");
  EXPECT_EQ(Device::default_device(), expected.fused());
}

TEST(Device, KilnDeviceCpu) {
  ScopedEnv fusion("KILN_FUSION", nullptr);
  ScopedDeviceEnv env("cpu");
  EXPECT_EQ(Device::default_device(), Device::cpu().fused());
  // Creation without a device argument uses the default device.
  EXPECT_EQ(Tensor<1>::zeros({2}).device(), Device::cpu().fused());
}

TEST(Device, KilnFusionZeroLeavesTheDefaultUnfused) {
  ScopedDeviceEnv env("cpu");
  {
    ScopedEnv fusion("KILN_FUSION", "0");
    EXPECT_EQ(Device::default_device(), Device::cpu());
    EXPECT_EQ(Device::default_device().backend_name(), "cpu");
  }
  ScopedEnv fusion("KILN_FUSION", "1");
  EXPECT_EQ(Device::default_device().backend_name(), "fusion<cpu>");
}

TEST(Device, FusionIsAFlagThatCombinesWithAutodiff) {
  const Device cpu = Device::cpu();
  const Device fused = cpu.fused();
  EXPECT_TRUE(fused.is_fused());
  EXPECT_FALSE(cpu.is_fused());
  EXPECT_NE(fused, cpu);
  EXPECT_TRUE(fused.same_hardware(cpu));
  EXPECT_EQ(fused.without_fusion(), cpu);
  EXPECT_EQ(fused.autodiff(), cpu.autodiff().fused());
  EXPECT_TRUE(fused.autodiff().is_fused());
  EXPECT_EQ(fused.autodiff().without_autodiff(), fused);
  EXPECT_EQ(fused.to_string(), "cpu (fused)");
  EXPECT_EQ(fused.autodiff().to_string(), "cpu (fused, autodiff)");
  EXPECT_EQ(fused.backend_name(), "fusion<cpu>");
  EXPECT_EQ(fused.autodiff().backend_name(), "autodiff<fusion<cpu>>");
}

TEST(Device, KilnDeviceBadValuesListTheAcceptedForms) {
  for (const char* bad : {"gpu", "cuda:x", "cuda:", "cuda:-1", "CPU", "remote://", "cpu0"}) {
    ScopedDeviceEnv env(bad);
    const std::string message = expect_error<InvalidArgument>([] { Device::default_device(); });
    EXPECT_NE(message.find("[KILN_DEVICE]"), std::string::npos) << bad << ": " << message;
    EXPECT_NE(message.find(bad), std::string::npos) << "names the bad value: " << message;
    for (const char* form : {"\"cpu\"", "\"cuda\"", "\"cuda:N\"", "remote://HOST:PORT"}) {
      EXPECT_NE(message.find(form), std::string::npos) << bad << ": " << message;
    }
  }
}

// A port on the loopback address that nothing listens on (bound, then closed again).
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    ADD_FAILURE() << "no free port";
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

// Without a server at the address, the device is unavailable and the error names the address;
// a malformed address is an InvalidArgument. (tests/remote/ has the server's own tests.)
TEST(Device, RemoteWithoutAServerNamesTheAddress) {
#ifndef KILN_HAVE_REMOTE_SERVER
  // A build without the remote backend (static, or KILN_REMOTE=OFF) says so.
  expect_error<NotCompiled>([] { Device::remote("remote://127.0.0.1:7878", "token"); });
  GTEST_SKIP() << "built without the remote backend";
#endif
  const std::string address = "127.0.0.1:" + std::to_string(free_loopback_port());
  {
    ScopedDeviceEnv env(("remote://" + address).c_str());
    const std::string message = expect_error<BackendUnavailable>([] { Device::default_device(); });
    EXPECT_NE(message.find(address), std::string::npos) << message;
  }
  const std::string message =
      expect_error<BackendUnavailable>([&] { Device::remote("tcp://" + address, "token"); });
  EXPECT_NE(message.find(address), std::string::npos) << message;
  for (const char* bad :
       {"", "remote://127.0.0.1", "remote://:80", "remote://h:99999", "remote://h:port"}) {
    expect_error<InvalidArgument>([&] { Device::remote(bad, "token"); });
  }
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
}

// CUDA: NotCompiled without the plugin, BackendUnavailable without a usable GPU (or past the
// last one), a device otherwise. tests/core/cuda_plugin_test.cpp has the plugin's own tests.
TEST(Device, CudaErrorsDependOnWhatIsThere) {
  std::string reason;
  bool not_compiled = false;
  const int gpus = cuda_device_count(&reason, &not_compiled);
  expect_error<InvalidArgument>([] { Device::cuda(-1); });
  for (int index : {0, 1, 3}) {
    if (index < gpus) {
      EXPECT_EQ(Device::cuda(index).index(), index);
    } else if (not_compiled) {
      const std::string message = expect_error<NotCompiled>([index] { Device::cuda(index); });
      EXPECT_NE(message.find("built without"), std::string::npos) << message;
      expect_error<NotCompiled>([index] { Device::parse("cuda:" + std::to_string(index)); });
    } else {
      expect_error<BackendUnavailable>([index] { Device::cuda(index); });
      ScopedDeviceEnv env(("cuda:" + std::to_string(index)).c_str());
      expect_error<BackendUnavailable>([] { Device::default_device(); });
    }
  }
}

TEST(Device, Count) {
  EXPECT_EQ(Device::count(DeviceKind::Cpu), 1);
  EXPECT_EQ(Device::count(DeviceKind::Cuda), cuda_device_count(nullptr));
  EXPECT_EQ(Device::count(DeviceKind::Remote), 0);
}

TEST(Device, BackendName) {
  EXPECT_EQ(Device::cpu().backend_name(), "cpu");
  std::ostringstream out;
  out << Device::cpu();
  EXPECT_EQ(out.str(), "cpu");
}

TEST(Device, CpuDTypeUsage) {
  const Device cpu = Device::cpu();
  const DTypeUsageSet computes{DTypeUsage::Storage, DTypeUsage::Arithmetic};
  for (DType dtype : kAllDTypes) {
    EXPECT_EQ(cpu.dtype_usage(dtype), computes) << dtype_name(dtype);
    EXPECT_FALSE(cpu.dtype_usage(dtype).contains(DTypeUsage::Accelerated)) << dtype_name(dtype);
    EXPECT_TRUE(cpu.supports_dtype(dtype)) << dtype_name(dtype);
  }
  // QFloat tensors are stored (as blocks); ops other than the quantized ones compute on their
  // dequantized values.
  EXPECT_EQ(cpu.dtype_usage(DType::QFloat), DTypeUsageSet{DTypeUsage::Storage});
  EXPECT_FALSE(cpu.supports_dtype(DType::QFloat));
}

TEST(DTypeUsageSet, Operations) {
  DTypeUsageSet set;
  EXPECT_TRUE(set.empty());
  set.insert(DTypeUsage::Accelerated);
  EXPECT_TRUE(set.contains(DTypeUsage::Accelerated));
  EXPECT_FALSE(set.contains(DTypeUsage::Storage));
  EXPECT_EQ(set, DTypeUsageSet{DTypeUsage::Accelerated});
}

// ---- settings, each in a fresh process ----

using test::require;
using test::require_throws;
class FreshDeviceSettings : public test::FreshProcess {};

TEST_F(FreshDeviceSettings, DefaultsAreTheBackendDefaults) {
  auto body = [] {
    const kiln::DeviceSettings s = Device::cpu().settings();
    require(s.float_dtype == DType::F32 && s.int_dtype == DType::I64 && s.bool_dtype == DType::Bool,
            "cpu defaults are f32, i64, bool");
  };
  KILN_IN_FRESH_PROCESS(body);
}

TEST_F(FreshDeviceSettings, SetBeforeFirstUseChangesCreationDTypes) {
  auto body = [] {
    const Device dev = Device::cpu();
    dev.set_default_dtypes(DType::F64, DType::I32, DType::Bool);
    require(dev.settings() == kiln::DeviceSettings{DType::F64, DType::I32, DType::Bool},
            "settings() reports what was set");
    require(Tensor<2>::ones({2, 3}, dev).dtype() == DType::F64, "ones is f64");
    require(
        Tensor<2>::ones({2, 3}, dev).into_data().to_vec<double>() == std::vector<double>(6, 1.0),
        "ones holds f64 ones");
    require(
        Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{1, 2}, {1, 2}), dev).dtype() ==
            DType::F32,
        "from_data keeps the data's dtype");
    require(Tensor<1, Int>::zeros({3}, dev).dtype() == DType::I32, "int zeros are i32");
    // The autodiff flag names the same hardware, so the same settings.
    require(dev.autodiff().settings() == dev.settings(), "autodiff device shares settings");
  };
  KILN_IN_FRESH_PROCESS(body);
}

TEST_F(FreshDeviceSettings, SecondSetIsAlreadyInitialized) {
  auto body = [] {
    const Device dev = Device::cpu();
    dev.set_default_dtypes(DType::F16, DType::I16, DType::Bool);
    require_throws<AlreadyInitialized>(
        [&] { dev.set_default_dtypes(DType::F32, DType::I64, DType::Bool); }, "second set");
    require(dev.settings().float_dtype == DType::F16, "first set stays");
  };
  KILN_IN_FRESH_PROCESS(body);
}

TEST_F(FreshDeviceSettings, SetAfterUseIsAlreadyInitialized) {
  auto body = [] {
    const Device dev = Device::cpu();
    (void)Tensor<1>::zeros({4}, dev);  // first use fixes the defaults
    try {
      dev.set_default_dtypes(DType::F64, DType::I64, DType::Bool);
      require(false, "set after use must throw");
    } catch (const AlreadyInitialized& error) {
      require(std::string(error.what()).find("[Device::set_default_dtypes]") == 0,
              std::string("message names the op: ") + error.what());
    }
    require(dev.settings().float_dtype == DType::F32, "defaults unchanged");
    require(Tensor<1>::zeros({4}, dev).dtype() == DType::F32, "creation still f32");
  };
  KILN_IN_FRESH_PROCESS(body);
}

TEST_F(FreshDeviceSettings, SettingsQueryCountsAsUse) {
  auto body = [] {
    const Device dev = Device::cpu();
    (void)dev.settings();
    require_throws<AlreadyInitialized>(
        [&] { dev.set_default_dtypes(DType::F64, DType::I64, DType::Bool); }, "set after query");
  };
  KILN_IN_FRESH_PROCESS(body);
}

TEST_F(FreshDeviceSettings, UnsupportedDTypeLeavesTheEntryUnset) {
  auto body = [] {
    const Device dev = Device::cpu();
    // Wrong kind for each role, and a dtype the CPU cannot compute in.
    require_throws<UnsupportedDType>(
        [&] { dev.set_default_dtypes(DType::I32, DType::I64, DType::Bool); }, "int as float");
    require_throws<UnsupportedDType>(
        [&] { dev.set_default_dtypes(DType::F32, DType::F64, DType::Bool); }, "float as int");
    require_throws<UnsupportedDType>(
        [&] { dev.set_default_dtypes(DType::F32, DType::I64, DType::U8); }, "u8 as bool");
    require_throws<UnsupportedDType>(
        [&] { dev.set_default_dtypes(DType::QFloat, DType::I64, DType::Bool); }, "qfloat");
    // Nothing was fixed, so a valid set still works.
    dev.set_default_dtypes(DType::BF16, DType::I8, DType::Bool);
    require(dev.settings().float_dtype == DType::BF16, "valid set after failures");
    require(Tensor<1>::ones({2}, dev).dtype() == DType::BF16, "creation uses bf16");
  };
  KILN_IN_FRESH_PROCESS(body);
}

}  // namespace
}  // namespace kiln
