// matmul on the GPU. f32, f16, bf16 and f64 go through cuBLASLt (lib/matmul.h: f32 accumulation
// for the 16-bit floats, rounded once; f64 in f64; f32 in full f32 unless the device allows tf32:
// Device::set_allow_tf32, read at each matmul). Operands are taken
// as they are laid out (transposed and strided views, broadcast batch dims with stride 0) when
// cuBLASLt accepts the layout; otherwise the odd operand is made contiguous first. Batch dims are
// merged where every operand walks them as one; what cannot be merged is looped over on the host
// around one strided-batched call each. A batch over a shared rhs (x [B, S, in] @ w [in, out])
// becomes one product with B * S rows. Integer dtypes (cuBLASLt has no wrap-around integer
// product) run a generated kernel with the CPU's semantics (int_matmul_source.h).
#include <span>
#include <vector>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_quant_tensor.h"
#include "backends/cuda/elementwise.h"
#include "backends/cuda/int_matmul_source.h"
#include "backends/cuda/lib/matmul.h"
#include "backends/cuda/lib_call.h"

namespace kiln::cuda {

namespace {

// Batch dims of the output walked as one: size, and the element strides of A, B and C over it.
struct Group {
  std::int64_t size = 1, a = 0, b = 0, c = 0;
};

// An operand's shape and element strides (a tensor's, or those a contiguous copy would have).
struct Operand {
  const Shape* shape;
  Strides strides;
};

// One way to run the product: the groups looped over on the host (outer) and the
// strided-batched cuBLASLt call (desc) for each.
struct Plan {
  std::vector<Group> outer;
  lib::MatmulDesc desc;
  bool supported = false;
};

// Stride of operand x over batch dim d of the broadcast batch shape (0 where x is broadcast).
std::int64_t batch_stride(const Operand& x, std::size_t batch_rank, std::size_t d) {
  const std::size_t own = x.shape->rank() - 2;
  if (d + own < batch_rank) return 0;
  const std::size_t i = d + own - batch_rank;
  return (*x.shape)[i] == 1 ? 0 : x.strides[i];
}

// The batch dims of size > 1, merged where A, B and C all walk two neighbours as one.
std::vector<Group> batch_groups(const Shape& batch, const Operand& a, const Operand& b,
                                std::int64_t matrix) {
  std::vector<Group> groups;
  std::int64_t c_stride = matrix * batch.num_elements();
  for (std::size_t d = 0; d < batch.rank(); ++d) {
    c_stride /= batch[d];
    if (batch[d] == 1) continue;
    const Group g{batch[d], batch_stride(a, batch.rank(), d), batch_stride(b, batch.rank(), d),
                  c_stride};
    if (!groups.empty()) {
      Group& prev = groups.back();
      if (prev.a == g.a * g.size && prev.b == g.b * g.size && prev.c == g.c * g.size) {
        prev = {prev.size * g.size, g.a, g.b, g.c};
        continue;
      }
    }
    groups.push_back(g);
  }
  return groups;
}

Plan make_plan(DType dtype, const Shape& batch, const Operand& a, const Operand& b) {
  const std::size_t ra = a.shape->rank(), rb = b.shape->rank();
  const std::int64_t m = (*a.shape)[ra - 2], k = (*a.shape)[ra - 1], n = (*b.shape)[rb - 1];
  Plan plan;
  plan.outer = batch_groups(batch, a, b, m * n);
  Group inner;
  if (!plan.outer.empty()) {
    inner = plan.outer.back();
    plan.outer.pop_back();
  }
  lib::MatmulDesc& d = plan.desc;
  d.dtype = dtype;
  d.m = m;
  d.n = n;
  d.k = k;
  d.batch = inner.size;
  d.a = {a.strides[ra - 2], a.strides[ra - 1], inner.a};
  d.b = {b.strides[rb - 2], b.strides[rb - 1], inner.b};
  d.c = {n, 1, inner.c};
  // cuBLASLt's batch offsets are taken as they are; keep them non-negative (flipped batch dims
  // are made contiguous).
  if (inner.a < 0 || inner.b < 0) return plan;
  plan.supported = lib::matmul_supported(d);
  if (!plan.supported || !plan.outer.empty() || d.batch == 1 || inner.b != 0) return plan;
  // A shared rhs: fold the batch into the rows when A's rows continue from one matrix to the next.
  if (m == 1 || inner.a == m * d.a.row_stride) {
    lib::MatmulDesc folded = d;
    folded.m = m * d.batch;
    folded.batch = 1;
    folded.a = {m == 1 ? inner.a : d.a.row_stride, d.a.col_stride, 0};
    folded.b.batch_stride = 0;
    folded.c = {n, 1, 0};
    if (lib::matmul_supported(folded)) d = folded;
  }
  return plan;
}

Operand operand_of(const CudaTensor& t) { return {&t.shape(), t.strides()}; }
Operand contiguous_operand(const CudaTensor& t) {
  return {&t.shape(), contiguous_strides(t.shape())};
}

Shape leading_dims(const Shape& s) {
  return Shape(std::span<const std::int64_t>(s.dims().data(), s.rank() - 2));
}

// Mirrors struct P of int_matmul_source.h: same members, same order.
struct IntMatmulParams {
  std::int64_t m, n, k, total;
  std::int64_t a_rs, a_cs, b_rs, b_cs;
  std::int32_t groups, pad;
  std::int64_t sizes[kMaxDims];
  std::int64_t a_bs[kMaxDims];
  std::int64_t b_bs[kMaxDims];
  std::uint64_t a, b, out;
};
static_assert(kMaxDims == 12, "int_matmul_source.h declares 12 batch groups");

void int_matmul(Runtime& runtime, const CudaTensor& a, const CudaTensor& b, const CudaTensor& out,
                const Shape& batch, const char* op) {
  const std::size_t ra = a.rank(), rb = b.rank();
  IntMatmulParams p{};
  p.m = a.shape()[ra - 2];
  p.k = a.shape()[ra - 1];
  p.n = b.shape()[rb - 1];
  p.total = out.shape().num_elements();
  p.a_rs = a.strides()[ra - 2];
  p.a_cs = a.strides()[ra - 1];
  p.b_rs = b.strides()[rb - 2];
  p.b_cs = b.strides()[rb - 1];
  const std::vector<Group> groups = batch_groups(batch, operand_of(a), operand_of(b), p.m * p.n);
  if (groups.size() > kMaxDims) {
    detail::fail<InvalidArgument>(op, "at most ", kMaxDims, " batch dims are supported on cuda");
  }
  p.groups = static_cast<std::int32_t>(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    p.sizes[g] = groups[g].size;
    p.a_bs[g] = groups[g].a;
    p.b_bs[g] = groups[g].b;
  }
  p.a = a.data();
  p.b = b.data();
  p.out = out.data();
  const DType dtype = out.dtype();
  const std::string key = std::string("int_matmul:") + short_name(dtype);
  CUfunction function =
      runtime.compiler.function(key, "kiln_int_matmul", [&] { return int_matmul_source(dtype); });
  constexpr unsigned kBlock = 256;
  runtime.launch(op, function, runtime.blocks_for(p.total, kBlock), kBlock, p);
}

// The host loops of plan: the product of its outer groups' sizes.
std::int64_t loop_count(const Plan& plan) {
  std::int64_t loops = 1;
  for (const Group& g : plan.outer) loops *= g.size;
  return loops;
}
// Host loops from which a contiguous copy of an operand is made to merge its batch dims.
constexpr std::int64_t kLoopsWorthACopy = 4;

// The cuBLASLt calls of plan: one strided-batched product per index of the outer groups.
void run_plan(Runtime& runtime, const Plan& plan, const CudaTensor& a, const CudaTensor& b,
              const CudaTensor& out, const char* op) {
  const std::int64_t loops = loop_count(plan);
  lib::MatmulDesc desc = plan.desc;
  desc.compute = product_compute(runtime, desc.dtype);
  cudaStream_t stream = lib_stream(runtime);
  for (std::int64_t index = 0; index < loops; ++index) {
    std::int64_t rest = index, oa = 0, ob = 0, oc = 0;
    for (std::size_t g = plan.outer.size(); g-- > 0;) {
      const Group& group = plan.outer[g];
      const std::int64_t i = rest % group.size;
      rest /= group.size;
      oa += i * group.a;
      ob += i * group.b;
      oc += i * group.c;
    }
    lib::matmul(desc, {device_address(a, oa), device_address(b, ob), device_address(out, oc)},
                stream);
  }
  runtime.context.note_launch(op);
}

}  // namespace

Primitive CudaBackend::matmul(Primitive lhs, Primitive rhs) {
  const char* op = "matmul";
  if (rhs->dtype() == DType::QFloat) [[unlikely]] {
    // A quantized weight: the product reads its blocks; a batch of them is decoded first.
    if (rhs->rank() == 2) return quantized_product(*this, std::move(lhs), rhs, std::nullopt);
    rhs = dequantize(std::move(rhs), lhs->dtype());
  }
  const DType dtype = lhs->dtype();
  const Shape& sl = lhs->shape();
  const Shape& sr = rhs->shape();
  const Shape batch = broadcast_shapes(leading_dims(sl), leading_dims(sr), op);
  detail::DimVector dims(batch.vector());
  dims.push_back(sl[sl.rank() - 2]);
  dims.push_back(sr[sr.rank() - 1]);
  const Shape out_shape(std::move(dims));
  TensorPtr out = make_tensor(dtype, out_shape, op);
  if (out_shape.num_elements() == 0) return out;
  if (sl[sl.rank() - 1] == 0) {
    // K = 0: every entry is an empty sum (all-zero bits in every dtype).
    runtime_.context.make_current();
    KILN_CUDA_CHECK(
        op, cuMemsetD8Async(out->data(), 0,
                            static_cast<std::size_t>(out_shape.num_elements()) * dtype_size(dtype),
                            runtime_.context.stream()));
    runtime_.context.note_launch(op);
    return out;
  }
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16 && dtype != DType::F64) {
    int_matmul(runtime_, as_cuda(lhs), as_cuda(rhs), *out, batch, op);
    return out;
  }

  // The operands as they are when cuBLASLt takes them, else the odd one (or both) contiguous.
  const CudaTensor& l = as_cuda(lhs);
  const CudaTensor& r = as_cuda(rhs);
  bool copy_l = false, copy_r = false;
  Plan plan = make_plan(dtype, batch, operand_of(l), operand_of(r));
  if (!plan.supported) {
    if (Plan p = make_plan(dtype, batch, contiguous_operand(l), operand_of(r)); p.supported) {
      copy_l = true;
    } else if (Plan q = make_plan(dtype, batch, operand_of(l), contiguous_operand(r));
               q.supported) {
      copy_r = true;
    } else {
      copy_l = copy_r = true;
    }
  }
  // Batch dims that do not merge (attention's heads as a view [B, H, S, D] of [B, S, H * D]) are
  // looped over on the host, a launch per index: B = 64 made 64 small launches per product
  // (11 of a BERT-base forward's 49 ms on the H200). From a few loops on, copying the operand
  // whose strides stand in the way is cheaper than the launches it saves.
  if (plan.supported && loop_count(plan) >= kLoopsWorthACopy) {
    std::int64_t fewest = loop_count(plan);
    for (const auto& [cl, cr] : {std::pair{true, false}, {false, true}, {true, true}}) {
      const Plan p = make_plan(dtype, batch, cl ? contiguous_operand(l) : operand_of(l),
                               cr ? contiguous_operand(r) : operand_of(r));
      if (p.supported && loop_count(p) < fewest) {
        fewest = loop_count(p);
        copy_l = cl;
        copy_r = cr;
      }
    }
  }
  TensorPtr a = copy_l ? contiguous(lhs, op) : std::static_pointer_cast<CudaTensor>(lhs);
  TensorPtr b = copy_r ? contiguous(rhs, op) : std::static_pointer_cast<CudaTensor>(rhs);
  if (copy_l || copy_r) plan = make_plan(dtype, batch, operand_of(*a), operand_of(*b));
  try {
    run_plan(runtime_, plan, *a, *b, *out, op);
  } catch (const UnsupportedOperation&) {
    // No cuBLASLt algorithm for these layouts or alignments (views at odd offsets): once more
    // on fresh contiguous copies, which are 256-byte aligned. The output is written in full.
    TensorPtr ac = make_tensor(dtype, sl, op), bc = make_tensor(dtype, sr, op);
    copy_into(*ac, *a, op);
    copy_into(*bc, *b, op);
    run_plan(runtime_, make_plan(dtype, batch, operand_of(*ac), operand_of(*bc)), *ac, *bc, *out,
             op);
  }
  return out;
}

}  // namespace kiln::cuda
