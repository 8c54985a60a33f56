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
  // The graph API's.
  using cudnn::Attribute;
  using cudnn::AttributeType;
  using cudnn::DescriptorType;
  static_assert(sizeof(DescriptorType) == sizeof(cudnnBackendDescriptorType_t));
  static_assert(static_cast<int>(DescriptorType::Convolution) ==
                CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  static_assert(static_cast<int>(DescriptorType::Engine) == CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  static_assert(static_cast<int>(DescriptorType::EngineConfig) ==
                CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  static_assert(static_cast<int>(DescriptorType::EngineHeuristics) ==
                CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  static_assert(static_cast<int>(DescriptorType::ExecutionPlan) ==
                CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  static_assert(static_cast<int>(DescriptorType::ConvolutionForward) ==
                CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  static_assert(static_cast<int>(DescriptorType::ConvolutionBackwardFilter) ==
                CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
  static_assert(static_cast<int>(DescriptorType::ConvolutionBackwardData) ==
                CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
  static_assert(static_cast<int>(DescriptorType::OperationGraph) ==
                CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  static_assert(static_cast<int>(DescriptorType::VariantPack) ==
                CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  static_assert(static_cast<int>(DescriptorType::Tensor) == CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  static_assert(sizeof(Attribute) == sizeof(cudnnBackendAttributeName_t));
  static_assert(static_cast<int>(Attribute::ConvolutionComputeType) ==
                CUDNN_ATTR_CONVOLUTION_COMP_TYPE);
  static_assert(static_cast<int>(Attribute::ConvolutionMode) == CUDNN_ATTR_CONVOLUTION_CONV_MODE);
  static_assert(static_cast<int>(Attribute::ConvolutionDilations) ==
                CUDNN_ATTR_CONVOLUTION_DILATIONS);
  static_assert(static_cast<int>(Attribute::ConvolutionStrides) ==
                CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES);
  static_assert(static_cast<int>(Attribute::ConvolutionPostPaddings) ==
                CUDNN_ATTR_CONVOLUTION_POST_PADDINGS);
  static_assert(static_cast<int>(Attribute::ConvolutionPrePaddings) ==
                CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS);
  static_assert(static_cast<int>(Attribute::ConvolutionSpatialDims) ==
                CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS);
  static_assert(static_cast<int>(Attribute::HeuristicsMode) == CUDNN_ATTR_ENGINEHEUR_MODE);
  static_assert(static_cast<int>(Attribute::HeuristicsGraph) ==
                CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
  static_assert(static_cast<int>(Attribute::HeuristicsResults) == CUDNN_ATTR_ENGINEHEUR_RESULTS);
  static_assert(static_cast<int>(Attribute::EngineConfigEngine) == CUDNN_ATTR_ENGINECFG_ENGINE);
  static_assert(static_cast<int>(Attribute::PlanHandle) == 400);  // deprecated, still read
  static_assert(static_cast<int>(Attribute::PlanEngineConfig) ==
                CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
  static_assert(static_cast<int>(Attribute::PlanWorkspaceSize) ==
                CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE);
  static_assert(static_cast<int>(Attribute::ForwardAlpha) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA);
  static_assert(static_cast<int>(Attribute::ForwardBeta) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA);
  static_assert(static_cast<int>(Attribute::ForwardConvolution) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC);
  static_assert(static_cast<int>(Attribute::ForwardW) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W);
  static_assert(static_cast<int>(Attribute::ForwardX) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X);
  static_assert(static_cast<int>(Attribute::ForwardY) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y);
  static_assert(static_cast<int>(Attribute::BackwardDataAlpha) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA);
  static_assert(static_cast<int>(Attribute::BackwardDataBeta) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA);
  static_assert(static_cast<int>(Attribute::BackwardDataConvolution) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC);
  static_assert(static_cast<int>(Attribute::BackwardDataW) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W);
  static_assert(static_cast<int>(Attribute::BackwardDataDx) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX);
  static_assert(static_cast<int>(Attribute::BackwardDataDy) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY);
  static_assert(static_cast<int>(Attribute::BackwardFilterAlpha) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA);
  static_assert(static_cast<int>(Attribute::BackwardFilterBeta) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA);
  static_assert(static_cast<int>(Attribute::BackwardFilterConvolution) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC);
  static_assert(static_cast<int>(Attribute::BackwardFilterDw) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW);
  static_assert(static_cast<int>(Attribute::BackwardFilterX) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X);
  static_assert(static_cast<int>(Attribute::BackwardFilterDy) ==
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY);
  static_assert(static_cast<int>(Attribute::GraphHandle) == 800);  // deprecated, still read
  static_assert(static_cast<int>(Attribute::GraphOperations) == CUDNN_ATTR_OPERATIONGRAPH_OPS);
  static_assert(static_cast<int>(Attribute::TensorAlignment) == CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT);
  static_assert(static_cast<int>(Attribute::TensorDataType) == CUDNN_ATTR_TENSOR_DATA_TYPE);
  static_assert(static_cast<int>(Attribute::TensorDimensions) == CUDNN_ATTR_TENSOR_DIMENSIONS);
  static_assert(static_cast<int>(Attribute::TensorStrides) == CUDNN_ATTR_TENSOR_STRIDES);
  static_assert(static_cast<int>(Attribute::TensorUniqueId) == CUDNN_ATTR_TENSOR_UNIQUE_ID);
  static_assert(static_cast<int>(Attribute::VariantUniqueIds) ==
                CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
  static_assert(static_cast<int>(Attribute::VariantDataPointers) ==
                CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
  static_assert(static_cast<int>(Attribute::VariantWorkspace) == CUDNN_ATTR_VARIANT_PACK_WORKSPACE);
  static_assert(static_cast<int>(Attribute::EngineNumericalNotes) ==
                CUDNN_ATTR_ENGINE_NUMERICAL_NOTE);
  static_assert(sizeof(AttributeType) == sizeof(cudnnBackendAttributeType_t));
  static_assert(static_cast<int>(AttributeType::Handle) == CUDNN_TYPE_HANDLE);
  static_assert(static_cast<int>(AttributeType::DataType) == CUDNN_TYPE_DATA_TYPE);
  static_assert(static_cast<int>(AttributeType::Int64) == CUDNN_TYPE_INT64);
  static_assert(static_cast<int>(AttributeType::Float) == CUDNN_TYPE_FLOAT);
  static_assert(static_cast<int>(AttributeType::Double) == CUDNN_TYPE_DOUBLE);
  static_assert(static_cast<int>(AttributeType::VoidPointer) == CUDNN_TYPE_VOID_PTR);
  static_assert(static_cast<int>(AttributeType::ConvolutionMode) == CUDNN_TYPE_CONVOLUTION_MODE);
  static_assert(static_cast<int>(AttributeType::HeuristicsMode) == CUDNN_TYPE_HEUR_MODE);
  static_assert(static_cast<int>(AttributeType::NumericalNote) == CUDNN_TYPE_NUMERICAL_NOTE);
  static_assert(static_cast<int>(AttributeType::Descriptor) == CUDNN_TYPE_BACKEND_DESCRIPTOR);
  static_assert(sizeof(cudnn::HeuristicsMode) == sizeof(cudnnBackendHeurMode_t));
  static_assert(static_cast<int>(cudnn::HeuristicsMode::Instant) == CUDNN_HEUR_MODE_INSTANT);
  static_assert(static_cast<int>(cudnn::HeuristicsMode::A) == CUDNN_HEUR_MODE_A);
  using cudnn::NumericalNote;
  static_assert(sizeof(NumericalNote) == sizeof(cudnnBackendNumericalNote_t));
  static_assert(static_cast<int>(NumericalNote::TensorCore) == CUDNN_NUMERICAL_NOTE_TENSOR_CORE);
  static_assert(static_cast<int>(NumericalNote::DownConvertInputs) ==
                CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS);
  static_assert(static_cast<int>(NumericalNote::ReducedPrecisionReduction) ==
                CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION);
  static_assert(static_cast<int>(NumericalNote::Fft) == CUDNN_NUMERICAL_NOTE_FFT);
  static_assert(static_cast<int>(NumericalNote::Nondeterministic) ==
                CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);
  static_assert(static_cast<int>(NumericalNote::Winograd) == CUDNN_NUMERICAL_NOTE_WINOGRAD);
  static_assert(std::is_same_v<cudnn::BackendDescriptor, cudnnBackendDescriptor_t>);
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
