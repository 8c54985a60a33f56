// kiln's own declarations of cuDNN (src/backends/cuda/lib/cudnn_api.h) against the real cudnn.h
// where one is installed: the enum values kiln passes, the layout of the perf results it reads,
// and the shape of every function it looks up (result and parameters: pointer levels, constness,
// sizes; kiln's opaque types and enums stand for cuDNN's). No GPU and no library needed; without
// the header the test says so and skips.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <type_traits>

#include "backends/cuda/lib/cudnn_api.h"

#if __has_include(<cudnn.h>)
#include <cudnn.h>
#define KILN_TEST_HAVE_CUDNN_H 1
#endif

namespace {

namespace cudnn = kiln::cuda::cudnn;

#ifdef KILN_TEST_HAVE_CUDNN_H

// The types that stand for one another: kiln's opaque structs and enums, cuDNN's.
template <class T>
constexpr const char* name_of() {
  return nullptr;
}
#define KILN_SAME_TYPE(kiln_type, cudnn_type, name) \
  template <>                                       \
  constexpr const char* name_of<kiln_type>() {      \
    return name;                                    \
  }                                                 \
  template <>                                       \
  constexpr const char* name_of<cudnn_type>() {     \
    return name;                                    \
  }
KILN_SAME_TYPE(cudnn::Context, cudnnContext, "handle")
KILN_SAME_TYPE(cudnn::TensorStruct, cudnnTensorStruct, "tensor")
KILN_SAME_TYPE(cudnn::FilterStruct, cudnnFilterStruct, "filter")
KILN_SAME_TYPE(cudnn::ConvolutionStruct, cudnnConvolutionStruct, "convolution")
KILN_SAME_TYPE(cudnn::Status, cudnnStatus_t, "status")
KILN_SAME_TYPE(cudnn::DataType, cudnnDataType_t, "data type")
KILN_SAME_TYPE(cudnn::MathType, cudnnMathType_t, "math type")
KILN_SAME_TYPE(cudnn::TensorFormat, cudnnTensorFormat_t, "format")
KILN_SAME_TYPE(cudnn::ConvolutionMode, cudnnConvolutionMode_t, "mode")
#undef KILN_SAME_TYPE
// The one layout kiln has for cuDNN's three perf structs (their layouts are compared below).
template <>
constexpr const char* name_of<cudnnConvolutionFwdAlgoPerf_t>() {
  return "perf";
}
template <>
constexpr const char* name_of<cudnnConvolutionBwdDataAlgoPerf_t>() {
  return "perf";
}
template <>
constexpr const char* name_of<cudnnConvolutionBwdFilterAlgoPerf_t>() {
  return "perf";
}
template <>
constexpr const char* name_of<cudnn::AlgoPerf>() {
  return "perf";
}

template <class T>
concept Complete = requires {
  sizeof(T);
};

// A type as the calling convention sees it: "*" per pointer level ("c" when what it points to is
// const), then the name of a type kiln declares for cuDNN's (above), "v" for void, "i<size>" for
// another integer or enum (the algorithms: ints for kiln), "f<size>" for a floating-point
// number, "s<size>" for another struct, "o" for another opaque one (CUDA's stream).
template <class T>
std::string shape_of() {
  if constexpr (std::is_pointer_v<T>) {
    using Pointee = std::remove_pointer_t<T>;
    return std::string("*") + (std::is_const_v<Pointee> ? "c" : "") +
           shape_of<std::remove_cv_t<Pointee>>();
  } else if constexpr (name_of<T>() != nullptr) {
    return name_of<T>();
  } else if constexpr (std::is_void_v<T>) {
    return "v";
  } else if constexpr (std::is_integral_v<T> || std::is_enum_v<T>) {
    return "i" + std::to_string(sizeof(T));
  } else if constexpr (std::is_floating_point_v<T>) {
    return "f" + std::to_string(sizeof(T));
  } else if constexpr (Complete<T>) {
    return "s" + std::to_string(sizeof(T));
  } else {
    return "o";
  }
}

template <class Function>
struct Signature;
template <class Result, class... Parameters>
struct Signature<Result (*)(Parameters...)> {
  static std::string text() {
    std::string out = shape_of<Result>() + "(";
    ((out += shape_of<Parameters>() + ","), ...);
    return out + ")";
  }
};

TEST(CudnnAbi, TheHeaderIsCudnn9) {
  EXPECT_EQ(CUDNN_MAJOR, static_cast<int>(cudnn::kMajor))
      << "cudnn_api.h declares cuDNN " << cudnn::kMajor << "'s API";
  EXPECT_EQ(cudnn::refuse_version(CUDNN_VERSION), "");
  EXPECT_EQ(cudnn::version_text(CUDNN_VERSION), std::to_string(CUDNN_MAJOR) + "." +
                                                    std::to_string(CUDNN_MINOR) + "." +
                                                    std::to_string(CUDNN_PATCHLEVEL));
}

TEST(CudnnAbi, EnumValuesMatch) {
  static_assert(sizeof(cudnn::Status) == sizeof(cudnnStatus_t));
  static_assert(static_cast<int>(cudnn::Status::Success) == CUDNN_STATUS_SUCCESS);
  static_assert(static_cast<int>(cudnn::Status::BadParam) == CUDNN_STATUS_BAD_PARAM);
  static_assert(static_cast<int>(cudnn::Status::NotSupported) == CUDNN_STATUS_NOT_SUPPORTED);
  static_assert(static_cast<int>(cudnn::Status::InternalError) == CUDNN_STATUS_INTERNAL_ERROR);
  static_assert(static_cast<int>(cudnn::Status::DeviceAllocationFailed) ==
                CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED);
  static_assert(static_cast<int>(cudnn::Status::ExecutionFailed) == CUDNN_STATUS_EXECUTION_FAILED);
  // The categories as cuDNN computes them.
  static_assert(static_cast<int>(cudnn::category(
                    static_cast<cudnn::Status>(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT))) ==
                CUDNN_STATUS_CATEGORY(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT));
  static_assert(static_cast<int>(cudnn::category(static_cast<cudnn::Status>(
                    CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER))) == CUDNN_STATUS_BAD_PARAM);

  static_assert(sizeof(cudnn::DataType) == sizeof(cudnnDataType_t));
  static_assert(static_cast<int>(cudnn::DataType::Float) == CUDNN_DATA_FLOAT);
  static_assert(static_cast<int>(cudnn::DataType::Double) == CUDNN_DATA_DOUBLE);
  static_assert(static_cast<int>(cudnn::DataType::Half) == CUDNN_DATA_HALF);
  static_assert(static_cast<int>(cudnn::DataType::BFloat16) == CUDNN_DATA_BFLOAT16);

  static_assert(sizeof(cudnn::MathType) == sizeof(cudnnMathType_t));
  static_assert(static_cast<int>(cudnn::MathType::Default) == CUDNN_DEFAULT_MATH);
  static_assert(static_cast<int>(cudnn::MathType::TensorOp) == CUDNN_TENSOR_OP_MATH);
  static_assert(static_cast<int>(cudnn::MathType::TensorOpAllowConversion) ==
                CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
  static_assert(static_cast<int>(cudnn::MathType::Fma) == CUDNN_FMA_MATH);

  static_assert(sizeof(cudnn::TensorFormat) == sizeof(cudnnTensorFormat_t));
  static_assert(static_cast<int>(cudnn::TensorFormat::Nchw) == CUDNN_TENSOR_NCHW);
  static_assert(sizeof(cudnn::ConvolutionMode) == sizeof(cudnnConvolutionMode_t));
  static_assert(static_cast<int>(cudnn::ConvolutionMode::Convolution) == CUDNN_CONVOLUTION);
  static_assert(static_cast<int>(cudnn::ConvolutionMode::CrossCorrelation) ==
                CUDNN_CROSS_CORRELATION);
  static_assert(sizeof(cudnn::Determinism) == sizeof(cudnnDeterminism_t));
  static_assert(static_cast<int>(cudnn::Determinism::NonDeterministic) == CUDNN_NON_DETERMINISTIC);
  static_assert(static_cast<int>(cudnn::Determinism::Deterministic) == CUDNN_DETERMINISTIC);
  // The algorithms travel as ints.
  static_assert(sizeof(int) == sizeof(cudnnConvolutionFwdAlgo_t));
  static_assert(sizeof(int) == sizeof(cudnnConvolutionBwdDataAlgo_t));
  static_assert(sizeof(int) == sizeof(cudnnConvolutionBwdFilterAlgo_t));
}

// One AlgoPerf stands for the three perf structs: same size, same offsets.
template <class Perf>
void expect_perf_layout(const char* name) {
  SCOPED_TRACE(name);
  EXPECT_EQ(sizeof(cudnn::AlgoPerf), sizeof(Perf));
  EXPECT_EQ(alignof(cudnn::AlgoPerf), alignof(Perf));
  EXPECT_EQ(offsetof(cudnn::AlgoPerf, algo), offsetof(Perf, algo));
  EXPECT_EQ(offsetof(cudnn::AlgoPerf, status), offsetof(Perf, status));
  EXPECT_EQ(offsetof(cudnn::AlgoPerf, time), offsetof(Perf, time));
  EXPECT_EQ(offsetof(cudnn::AlgoPerf, memory), offsetof(Perf, memory));
  EXPECT_EQ(offsetof(cudnn::AlgoPerf, determinism), offsetof(Perf, determinism));
  EXPECT_EQ(offsetof(cudnn::AlgoPerf, math_type), offsetof(Perf, mathType));
  EXPECT_EQ(offsetof(cudnn::AlgoPerf, reserved), offsetof(Perf, reserved));
  EXPECT_EQ(sizeof(cudnn::AlgoPerf::reserved), sizeof(Perf::reserved));
}

TEST(CudnnAbi, PerfResultsHaveTheHeadersLayout) {
  expect_perf_layout<cudnnConvolutionFwdAlgoPerf_t>("cudnnConvolutionFwdAlgoPerf_t");
  expect_perf_layout<cudnnConvolutionBwdDataAlgoPerf_t>("cudnnConvolutionBwdDataAlgoPerf_t");
  expect_perf_layout<cudnnConvolutionBwdFilterAlgoPerf_t>("cudnnConvolutionBwdFilterAlgoPerf_t");
}

TEST(CudnnAbi, EveryFunctionHasTheHeadersShape) {
  int checked = 0;
#define KILN_CHECK_SHAPE(member, symbol, result, parameters)               \
  EXPECT_EQ(Signature<decltype(cudnn::Api::member)>::text(),               \
            Signature<std::remove_cv_t<decltype(&::symbol)>>::text())      \
      << #symbol;                                                          \
  static_assert(std::is_pointer_v<decltype(cudnn::Api::member)>, #member); \
  ++checked;
  KILN_CUDNN_FUNCTIONS(KILN_CHECK_SHAPE)
#undef KILN_CHECK_SHAPE
  EXPECT_EQ(checked, static_cast<int>(std::size(cudnn::kSymbols)));
  // A wrong shape is seen: the forward heuristic against the backward filter one (as many
  // parameters, the filter's descriptor where the windows' side was).
  EXPECT_NE(Signature<decltype(cudnn::Api::forward_heuristic)>::text(),
            Signature<decltype(&::cudnnGetConvolutionBackwardFilterAlgorithm_v7)>::text());
}

#else

TEST(CudnnAbi, NeedsCudnnHeader) {
  GTEST_SKIP() << "cudnn.h was not found when this test was built: kiln's declarations of cuDNN "
                  "(cudnn_api.h) are not checked here";
}

#endif

// Without the header too: the symbol list follows the declarations.
TEST(CudnnAbi, SymbolsFollowTheDeclarations) {
  EXPECT_EQ(std::size(cudnn::kSymbols), sizeof(cudnn::Api) / sizeof(void (*)()));
  EXPECT_STREQ(cudnn::kSymbols[0], "cudnnGetVersion");
  EXPECT_EQ(cudnn::refuse_version(91900), "");
  EXPECT_NE(cudnn::refuse_version(8907).find("is not cuDNN 9"), std::string::npos);
  EXPECT_NE(cudnn::refuse_version(100000).find("cuDNN 10.0.0"), std::string::npos);
}

}  // namespace
