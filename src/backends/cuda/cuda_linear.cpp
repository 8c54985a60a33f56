// linear: x [..., in] @ weight [in, out] + bias [out] as one cuBLASLt call whose epilogue adds the
// bias (lib/matmul.h), where the default composes a product and a broadcast add: one launch and
// one pass over the result fewer for every nn::Linear layer. Without a bias, for integer dtypes,
// or where cuBLASLt does not take the layouts, the default's composition runs. linear_epilogue
// is also how a fused group runs a product with the bias and activation recorded after it, or a
// scale and a sum with a tensor of its shape (cuda_fused.cpp).
#include "backends/cuda/cuda_quant_tensor.h"
#include "backends/cuda/lib_call.h"

namespace kiln::cuda {

namespace {

// x's rows as one [rows, in] matrix without a copy: its strides, or nothing when the leading dims
// do not walk as one.
struct Rows {
  std::int64_t row_stride = 0, col_stride = 1;
  bool ok = false;
};

Rows rows_of(const CudaTensor& x) {
  const std::size_t rank = x.rank();
  const Strides& s = x.strides();
  if (rank == 1) return {0, s[0], true};
  // Leading dims collapse when each steps over the whole of the ones after it.
  for (std::size_t d = 0; d + 2 < rank; ++d) {
    if (x.shape()[d] != 1 && s[d] != s[d + 1] * x.shape()[d + 1]) return {};
  }
  return {s[rank - 2], s[rank - 1], true};
}

}  // namespace

Primitive CudaBackend::linear(Primitive x, Primitive weight, OptionalPrimitive bias) {
  if (weight->dtype() == DType::QFloat) [[unlikely]]
    return quantized_product(*this, std::move(x), weight, std::move(bias));
  if (bias) {
    if (Primitive out = linear_epilogue(x, weight, &*bias, lib::Epilogue::Bias)) return out;
  }
  return Backend::linear(std::move(x), std::move(weight), std::move(bias));
}

Primitive CudaBackend::linear_epilogue(const Primitive& x, const Primitive& weight,
                                       const Primitive* bias, lib::Epilogue epilogue,
                                       const ProductSum& sum) {
  const char* op = "linear";
  const DType dtype = x->dtype();
  const bool float_product =
      dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16 || dtype == DType::F64;
  if (!float_product || weight->dtype() != dtype || (bias && (*bias)->dtype() != dtype)) {
    return nullptr;
  }
  if ((sum.addend != nullptr || sum.alpha != 1.0) &&
      (epilogue != lib::Epilogue::None ||
       (sum.addend != nullptr && (*sum.addend)->dtype() != dtype))) {
    return nullptr;
  }
  const Shape& shape = x->shape();
  // weight's last two dims; any before them are 1 (a matmul's right operand of higher rank).
  const Shape& ws = weight->shape();
  const std::size_t wr = ws.rank();
  if (wr < 2 || shape.rank() < wr) return nullptr;
  for (std::size_t d = 0; d + 2 < wr; ++d) {
    if (ws[d] != 1) return nullptr;
  }
  const std::int64_t in = ws[wr - 2], out = ws[wr - 1];
  detail::DimVector dims(shape.vector());
  dims.back() = out;
  const Shape out_shape(std::move(dims));
  const std::int64_t rows = out_shape.num_elements() / std::max<std::int64_t>(out, 1);
  if (out_shape.num_elements() == 0 || in == 0) return nullptr;
  TensorPtr xs = std::static_pointer_cast<CudaTensor>(x);
  Rows r = rows_of(*xs);
  if (!r.ok) {
    xs = contiguous(x, op);
    r = rows_of(*xs);
  }
  if (rows == 1) r.row_stride = in;  // any stride serves one row; cuBLASLt wants it >= in
  TensorPtr b = bias ? contiguous(*bias, op) : nullptr;
  const CudaTensor& w = as_cuda(weight);
  lib::MatmulDesc desc;
  desc.dtype = dtype;
  desc.m = rows;
  desc.n = out;
  desc.k = in;
  desc.a = {r.row_stride, r.col_stride, 0};
  desc.b = {w.strides()[wr - 2], w.strides()[wr - 1], 0};
  desc.c = {out, 1, 0};
  desc.epilogue = epilogue;
  if (!lib::matmul_supported(desc)) return nullptr;
  desc.compute = product_compute(runtime_, dtype);
  TensorPtr addend;
  if (sum.addend != nullptr) {
    if ((*sum.addend)->shape() != out_shape) return nullptr;
    addend = contiguous(*sum.addend, op);
  }
  // In place only where the product reads nothing of the addend's storage: cuBLASLt reads A and
  // B while it writes C.
  const bool in_place = sum.in_place && addend && addend.get() == sum.addend->get() &&
                        addend->storage_key() != xs->storage_key() &&
                        addend->storage_key() != w.storage_key();
  TensorPtr result = in_place ? addend : make_tensor(dtype, out_shape, op);
  try {
    lib::MatmulArgs args{device_address(*xs), device_address(w), device_address(*result),
                         b ? device_address(*b) : nullptr};
    args.alpha = sum.alpha;
    if (addend) {
      args.addend = device_address(*addend);
      args.beta = sum.beta;
    }
    lib::matmul(desc, args, lib_stream(runtime_));
  } catch (const UnsupportedOperation&) {
    return nullptr;  // no algorithm for these alignments (views at odd offsets)
  }
  runtime_.context.note_launch(op);
  return result;
}

}  // namespace kiln::cuda
