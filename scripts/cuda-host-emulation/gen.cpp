// Writes the generated sources of the scatter and spatial families into argv[1]; run.sh compiles
// each with the host compiler, shim.h included first.
#include <fstream>

#include "backends/cuda/scatter.h"
#include "backends/cuda/spatial.h"
using namespace kiln;
using namespace kiln::cuda;
static std::string dir;
static void put(const std::string& name, const std::string& src) {
  std::ofstream(dir + "/k_" + name + ".cpp") << src;
}
int main(int argc, char** argv) {
  if (argc < 2) return 2;
  dir = argv[1];
  const SpatialKernel all[] = {
      SpatialKernel::AvgPool,         SpatialKernel::AvgPoolBackward,
      SpatialKernel::MaxPool,         SpatialKernel::MaxPoolBackward,
      SpatialKernel::AdaptiveAvgPool, SpatialKernel::AdaptiveAvgPoolBackward};
  for (DType sd : {DType::F64, DType::F32, DType::BF16}) {
    const std::string suf = dtype_name(sd).data();
    for (auto k : all)
      put(spatial_kernel_name(k) + suf,
          spatial_source(k, sd, DType::I64, InterpolateMode::Nearest));
    int m = 0;
    for (auto mode :
         {InterpolateMode::Nearest, InterpolateMode::Bilinear, InterpolateMode::Bicubic}) {
      put("interpolate" + std::to_string(m) + suf,
          spatial_source(SpatialKernel::Interpolate, sd, DType::I64, mode));
      put("interpolate_backward" + std::to_string(m) + suf,
          spatial_source(SpatialKernel::InterpolateBackward, sd, DType::I64, mode));
      ++m;
    }
  }
  for (DType d :
       {DType::F64, DType::I8, DType::I16, DType::I32, DType::U64, DType::BF16, DType::Bool}) {
    for (IndexingUpdate u :
         {IndexingUpdate::Add, IndexingUpdate::Mul, IndexingUpdate::Min, IndexingUpdate::Max})
      put(std::string("scatter_") + dtype_name(d).data() + "_" + std::to_string(int(u)),
          scatter_source(d, DType::I64, u));
  }
  for (DType d : {DType::U64, DType::U16, DType::U8})
    put(std::string("scatter_") + dtype_name(d).data() + "_0",
        scatter_source(d, DType::I64, IndexingUpdate::Assign));
}
