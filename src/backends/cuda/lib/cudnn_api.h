// The part of cuDNN 9's legacy convolution API that the CUDA plugin calls, declared here so that
// building needs no cudnn.h and nothing links cuDNN: the plugin looks each function up in
// libcudnn.so.9 at run time (cudnn_loader.h). Values, layouts and signatures are cuDNN 9.x's;
// tests/gpu/backend_cudnn_abi_test.cpp checks them against the real header wherever one is
// installed. No CUDA header either, so the CPU tests can list and resolve the symbols.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

struct CUstream_st;  // CUDA's stream: CUstream and cudaStream_t are pointers to it

namespace kiln::cuda::cudnn {

// The major version these declarations are; cudnnGetVersion() is major * 10000 + minor * 100 +
// patch since cuDNN 9.
inline constexpr std::size_t kMajor = 9;

// Opaque objects, as pointers.
struct Context;
using Handle = Context*;
struct TensorStruct;
using TensorDescriptor = TensorStruct*;
struct FilterStruct;
using FilterDescriptor = FilterStruct*;
struct ConvolutionStruct;
using ConvolutionDescriptor = ConvolutionStruct*;

// cudnnStatus_t: its thousands are the category (cudnn_graph.h's CUDNN_STATUS_CATEGORY), the rest
// the detail; only the values kiln tests for are named.
enum class Status : int {
  Success = 0,
  BadParam = 2000,
  NotSupported = 3000,
  InternalError = 4000,
  DeviceAllocationFailed = 4004,
  ExecutionFailed = 5000,
};
constexpr Status category(Status status) {
  return static_cast<Status>(static_cast<int>(status) / 1000 * 1000);
}

enum class DataType : int { Float = 0, Double = 1, Half = 2, BFloat16 = 9 };
enum class MathType : int { Default = 0, TensorOp = 1, TensorOpAllowConversion = 2, Fma = 3 };
enum class TensorFormat : int { Nchw = 0 };
enum class ConvolutionMode : int { Convolution = 0, CrossCorrelation = 1 };
enum class Determinism : int { NonDeterministic = 0, Deterministic = 1 };

// The graph ("backend") API: every object is a descriptor of one of these types, built by setting
// its attributes, then finalised. Only the types, attributes and values kiln uses are named.
using BackendDescriptor = void*;
enum class DescriptorType : int {
  Convolution = 1,
  Engine = 2,
  EngineConfig = 3,
  EngineHeuristics = 4,
  ExecutionPlan = 5,
  ConvolutionForward = 10,
  ConvolutionBackwardFilter = 11,
  ConvolutionBackwardData = 12,
  OperationGraph = 15,
  VariantPack = 16,
  Tensor = 17,
};
enum class Attribute : int {
  ConvolutionComputeType = 100,
  ConvolutionMode = 101,
  ConvolutionDilations = 102,
  ConvolutionStrides = 103,
  ConvolutionPostPaddings = 104,
  ConvolutionPrePaddings = 105,
  ConvolutionSpatialDims = 106,
  HeuristicsMode = 200,
  HeuristicsGraph = 201,
  HeuristicsResults = 202,
  EngineConfigEngine = 300,
  PlanHandle = 400,
  PlanEngineConfig = 401,
  PlanWorkspaceSize = 402,
  ForwardAlpha = 700,
  ForwardBeta = 701,
  ForwardConvolution = 702,
  ForwardW = 703,
  ForwardX = 704,
  ForwardY = 705,
  BackwardDataAlpha = 706,
  BackwardDataBeta = 707,
  BackwardDataConvolution = 708,
  BackwardDataW = 709,
  BackwardDataDx = 710,
  BackwardDataDy = 711,
  BackwardFilterAlpha = 712,
  BackwardFilterBeta = 713,
  BackwardFilterConvolution = 714,
  BackwardFilterDw = 715,
  BackwardFilterX = 716,
  BackwardFilterDy = 717,
  GraphHandle = 800,
  GraphOperations = 801,
  TensorAlignment = 900,
  TensorDataType = 901,
  TensorDimensions = 902,
  TensorStrides = 903,
  TensorUniqueId = 906,
  VariantUniqueIds = 1000,
  VariantDataPointers = 1001,
  VariantWorkspace = 1003,
  EngineNumericalNotes = 1303,
};
enum class AttributeType : int {
  Handle = 0,
  DataType = 1,
  Int64 = 3,
  Float = 4,
  Double = 5,
  VoidPointer = 6,
  ConvolutionMode = 7,
  HeuristicsMode = 8,
  NumericalNote = 11,
  Descriptor = 15,
};
enum class HeuristicsMode : int { Instant = 0, A = 3 };
// What an engine's numbers are like: kiln takes none that is nondeterministic, converts its
// inputs down or reduces in less than f32.
enum class NumericalNote : int {
  TensorCore = 0,
  DownConvertInputs = 1,
  ReducedPrecisionReduction = 2,
  Fft = 3,
  Nondeterministic = 4,
  Winograd = 5,
};

// cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionBwdDataAlgoPerf_t and
// cudnnConvolutionBwdFilterAlgoPerf_t: one layout for the three, the algorithm as its int.
struct AlgoPerf {
  int algo;
  Status status;
  float time;          // milliseconds (the Find functions); -1 from the heuristics
  std::size_t memory;  // the workspace it needs, bytes
  Determinism determinism;
  MathType math_type;
  int reserved[3];
};

// Every function the plugin calls: X(member, cuDNN's name, result, parameters). The parameter
// names say which of the convolution's three tensors each descriptor is: the image x, the filter
// w and the windows' side y (conv's output; the data gradient's input).
#define KILN_CUDNN_FUNCTIONS(X)                                                                    \
  X(get_version, cudnnGetVersion, std::size_t, ())                                                 \
  X(error_string, cudnnGetErrorString, const char*, (Status))                                      \
  X(last_error_string, cudnnGetLastErrorString, void, (char* message, std::size_t size))           \
  X(create, cudnnCreate, Status, (Handle*))                                                        \
  X(destroy, cudnnDestroy, Status, (Handle))                                                       \
  X(set_stream, cudnnSetStream, Status, (Handle, CUstream_st*))                                    \
  X(create_tensor, cudnnCreateTensorDescriptor, Status, (TensorDescriptor*))                       \
  X(set_tensor, cudnnSetTensorNdDescriptor, Status,                                                \
    (TensorDescriptor, DataType, int dims, const int* sizes, const int* strides))                  \
  X(destroy_tensor, cudnnDestroyTensorDescriptor, Status, (TensorDescriptor))                      \
  X(create_filter, cudnnCreateFilterDescriptor, Status, (FilterDescriptor*))                       \
  X(set_filter, cudnnSetFilterNdDescriptor, Status,                                                \
    (FilterDescriptor, DataType, TensorFormat, int dims, const int* sizes))                        \
  X(destroy_filter, cudnnDestroyFilterDescriptor, Status, (FilterDescriptor))                      \
  X(create_convolution, cudnnCreateConvolutionDescriptor, Status, (ConvolutionDescriptor*))        \
  X(set_convolution, cudnnSetConvolutionNdDescriptor, Status,                                      \
    (ConvolutionDescriptor, int spatial, const int* padding, const int* stride,                    \
     const int* dilation, ConvolutionMode, DataType compute))                                      \
  X(set_group_count, cudnnSetConvolutionGroupCount, Status, (ConvolutionDescriptor, int groups))   \
  X(set_math_type, cudnnSetConvolutionMathType, Status, (ConvolutionDescriptor, MathType))         \
  X(destroy_convolution, cudnnDestroyConvolutionDescriptor, Status, (ConvolutionDescriptor))       \
  X(forward_count, cudnnGetConvolutionForwardAlgorithmMaxCount, Status, (Handle, int*))            \
  X(forward_heuristic, cudnnGetConvolutionForwardAlgorithm_v7, Status,                             \
    (Handle, TensorDescriptor x, FilterDescriptor w, ConvolutionDescriptor, TensorDescriptor y,    \
     int requested, int* returned, AlgoPerf*))                                                     \
  X(forward_find, cudnnFindConvolutionForwardAlgorithmEx, Status,                                  \
    (Handle, TensorDescriptor x, const void*, FilterDescriptor w, const void*,                     \
     ConvolutionDescriptor, TensorDescriptor y, void*, int requested, int* returned, AlgoPerf*,    \
     void* workspace, std::size_t workspace_bytes))                                                \
  X(forward_workspace, cudnnGetConvolutionForwardWorkspaceSize, Status,                            \
    (Handle, TensorDescriptor x, FilterDescriptor w, ConvolutionDescriptor, TensorDescriptor y,    \
     int algo, std::size_t* bytes))                                                                \
  X(forward, cudnnConvolutionForward, Status,                                                      \
    (Handle, const void* alpha, TensorDescriptor x, const void*, FilterDescriptor w, const void*,  \
     ConvolutionDescriptor, int algo, void* workspace, std::size_t workspace_bytes,                \
     const void* beta, TensorDescriptor y, void*))                                                 \
  X(backward_data_count, cudnnGetConvolutionBackwardDataAlgorithmMaxCount, Status, (Handle, int*)) \
  X(backward_data_heuristic, cudnnGetConvolutionBackwardDataAlgorithm_v7, Status,                  \
    (Handle, FilterDescriptor w, TensorDescriptor y, ConvolutionDescriptor, TensorDescriptor x,    \
     int requested, int* returned, AlgoPerf*))                                                     \
  X(backward_data_find, cudnnFindConvolutionBackwardDataAlgorithmEx, Status,                       \
    (Handle, FilterDescriptor w, const void*, TensorDescriptor y, const void*,                     \
     ConvolutionDescriptor, TensorDescriptor x, void*, int requested, int* returned, AlgoPerf*,    \
     void* workspace, std::size_t workspace_bytes))                                                \
  X(backward_data_workspace, cudnnGetConvolutionBackwardDataWorkspaceSize, Status,                 \
    (Handle, FilterDescriptor w, TensorDescriptor y, ConvolutionDescriptor, TensorDescriptor x,    \
     int algo, std::size_t* bytes))                                                                \
  X(backward_data, cudnnConvolutionBackwardData, Status,                                           \
    (Handle, const void* alpha, FilterDescriptor w, const void*, TensorDescriptor y, const void*,  \
     ConvolutionDescriptor, int algo, void* workspace, std::size_t workspace_bytes,                \
     const void* beta, TensorDescriptor x, void*))                                                 \
  X(backward_filter_count, cudnnGetConvolutionBackwardFilterAlgorithmMaxCount, Status,             \
    (Handle, int*))                                                                                \
  X(backward_filter_heuristic, cudnnGetConvolutionBackwardFilterAlgorithm_v7, Status,              \
    (Handle, TensorDescriptor x, TensorDescriptor y, ConvolutionDescriptor, FilterDescriptor w,    \
     int requested, int* returned, AlgoPerf*))                                                     \
  X(backward_filter_find, cudnnFindConvolutionBackwardFilterAlgorithmEx, Status,                   \
    (Handle, TensorDescriptor x, const void*, TensorDescriptor y, const void*,                     \
     ConvolutionDescriptor, FilterDescriptor w, void*, int requested, int* returned, AlgoPerf*,    \
     void* workspace, std::size_t workspace_bytes))                                                \
  X(backward_filter_workspace, cudnnGetConvolutionBackwardFilterWorkspaceSize, Status,             \
    (Handle, TensorDescriptor x, TensorDescriptor y, ConvolutionDescriptor, FilterDescriptor w,    \
     int algo, std::size_t* bytes))                                                                \
  X(backward_filter, cudnnConvolutionBackwardFilter, Status,                                       \
    (Handle, const void* alpha, TensorDescriptor x, const void*, TensorDescriptor y, const void*,  \
     ConvolutionDescriptor, int algo, void* workspace, std::size_t workspace_bytes,                \
     const void* beta, FilterDescriptor w, void*))                                                 \
  X(backend_create, cudnnBackendCreateDescriptor, Status, (DescriptorType, BackendDescriptor*))    \
  X(backend_destroy, cudnnBackendDestroyDescriptor, Status, (BackendDescriptor))                   \
  X(backend_finalize, cudnnBackendFinalize, Status, (BackendDescriptor))                           \
  X(backend_set, cudnnBackendSetAttribute, Status,                                                 \
    (BackendDescriptor, Attribute, AttributeType, std::int64_t count, const void* elements))       \
  X(backend_get, cudnnBackendGetAttribute, Status,                                                 \
    (BackendDescriptor const, Attribute, AttributeType, std::int64_t requested,                    \
     std::int64_t* count, void* elements))                                                         \
  X(backend_execute, cudnnBackendExecute, Status,                                                  \
    (Handle, BackendDescriptor plan, BackendDescriptor variant_pack))

// The functions as the library has them.
struct Api {
#define KILN_CUDNN_MEMBER(member, symbol, result, parameters) result(*member) parameters = nullptr;
  KILN_CUDNN_FUNCTIONS(KILN_CUDNN_MEMBER)
#undef KILN_CUDNN_MEMBER
};

// Their names, in Api's order: what the library must export.
inline constexpr const char* kSymbols[] = {
#define KILN_CUDNN_NAME(member, symbol, result, parameters) #symbol,
    KILN_CUDNN_FUNCTIONS(KILN_CUDNN_NAME)
#undef KILN_CUDNN_NAME
};

// Api filled from the addresses of kSymbols, in order.
inline Api bind(const std::vector<void*>& symbols) {
  Api api;
  std::size_t i = 0;
#define KILN_CUDNN_BIND(member, symbol, result, parameters) \
  api.member = reinterpret_cast<result(*) parameters>(symbols.at(i++));
  KILN_CUDNN_FUNCTIONS(KILN_CUDNN_BIND)
#undef KILN_CUDNN_BIND
  return api;
}

// cudnnGetVersion()'s number as text: "9.19.0".
inline std::string version_text(std::size_t version) {
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

// Why a library of this version cannot serve these declarations, or empty: the legacy API and
// the layouts above are cuDNN 9's.
inline std::string refuse_version(std::size_t version) {
  if (version / 10000 == kMajor) return {};
  return "cuDNN " + version_text(version) + " is not cuDNN " + std::to_string(kMajor) +
         ", whose API kiln declares";
}

}  // namespace kiln::cuda::cudnn
