// attention on the GPU: the flash kernel (bf16 and f16, head dims that are multiples of 16 up to
// 128), the f32 kernel (head dims that are multiples of 4 up to 64) and the default's composition
// (f64, other head dims) against float64 loops written
// here over the same (rounded) inputs: padding and full masks, a row with every key masked, an
// additive bias, the causal cut with queries and keys of different lengths, lengths that are not
// multiples of the 128-row and 64-key tiles, heads viewed out of [B, S, H, D], broadcast batch and
// head dims (one key head for many query heads), rows off 16-byte boundaries, NaN inputs.
// (backend_codegen_test.cpp compiles the kernel's source with NVRTC on machines without a GPU.)
// The cases and the reference are attention_cases.h's, which the emulated kernel's test shares.
#include <optional>

#include "contract/strided_tensor.h"
#include "gpu/attention_cases.h"
#include "runtime/registry.h"

using namespace kiln;
using test::on;

namespace gpu_attention {

void check_case(const Device& gpu, const AttentionCase& c, std::uint64_t seed) {
  const Inputs in = make_inputs(c, seed);
  const AttentionOptions options{.scale = std::nullopt, .is_causal = c.causal};
  const Primitive got_gpu = detail::attention(
      on(in.q, gpu), on(in.k, gpu), on(in.v, gpu),
      in.mask ? std::optional<Primitive>(on(*in.mask, gpu)) : std::nullopt,
      in.bias ? std::optional<Primitive>(on(*in.bias, gpu)) : std::nullopt, options);
  expect_matches(c, in, detail::into_data(got_gpu));
}

// attention's gradients on the GPU (attention_query_backward, attention_key_value_backward,
// given the GPU's forward output, or with copy_output a copy of it: then the statistics the
// forward pass kept with its output are not there to use) against float64 loops, summed to each
// operand's shape.
void check_backward_case(const Device& gpu, const AttentionCase& c, std::uint64_t seed,
                         bool copy_output = false) {
  const Inputs in = make_inputs(c, seed);
  const AttentionOptions options{.scale = std::nullopt, .is_causal = c.causal};
  const Primitive q = on(in.q, gpu), k = on(in.k, gpu), v = on(in.v, gpu);
  const std::optional<Primitive> mask =
      in.mask ? std::optional<Primitive>(on(*in.mask, gpu)) : std::nullopt;
  const std::optional<Primitive> bias =
      in.bias ? std::optional<Primitive>(on(*in.bias, gpu)) : std::nullopt;
  Primitive out = detail::attention(q, k, v, mask, bias, options);
  if (copy_output) out = on(on(out, Device::cpu()), gpu);
  const Shape out_shape = out->shape();
  const Primitive grad = test::host_random(out_shape, c.dtype, seed + 7, -1, 1);
  Backend& backend = backend_for(gpu);
  // In autodiff's order: dk and dv first (on Hopper their kernel computes dq too and leaves it
  // with the forward's output for the query op).
  const Primitive grad_gpu = on(grad, gpu);
  const auto [dk, dv] = backend.attention_key_value_backward(q, k, v, out, grad_gpu, mask, bias,
                                                             std::nullopt, options);
  const Primitive dq =
      backend.attention_query_backward(q, k, v, out, grad_gpu, mask, bias, std::nullopt, options);
  std::optional<Host4> mask_host, bias_host;
  if (in.mask) mask_host = host4(*in.mask);
  if (in.bias) bias_host = host4(*in.bias);
  const ReferenceGrads want =
      reference_grads(host4(in.q), host4(in.k), host4(in.v), mask_host, bias_host, host4(grad),
                      1.0 / std::sqrt(static_cast<double>(c.depth)), c.causal);
  const Shape full_q{c.batch, c.heads, c.queries, c.depth};
  const Shape full_k{c.batch, c.heads, c.keys, c.depth};
  auto check = [&](const Primitive& got, const std::vector<double>& full, const Shape& from,
                   const Primitive& operand, const char* name) {
    ASSERT_EQ(got->shape(), operand->shape()) << describe(c) << " " << name;
    ASSERT_EQ(got->dtype(), c.dtype) << describe(c) << " " << name;
    expect_near(detail::into_data(got).to_f64_vec(), sum_to(full, from, operand->shape()), c.dtype,
                describe(c) + " " + name);
  };
  check(dq, want.dq, full_q, in.q, "dq");
  check(dk, want.dk, full_k, in.k, "dk");
  check(dv, want.dv, full_k, in.v, "dv");
}

}  // namespace gpu_attention

TEST(GpuAttention, MatchesFloat64Reference) {
  KILN_REQUIRE_GPU();
  const DType b = DType::BF16, h = DType::F16;
  const gpu_attention::AttentionCase cases[] = {
      {b, 2, 3, 100, 77, 64},
      {h, 1, 2, 130, 200, 128, gpu_attention::MaskKind::None, false, true},
      {b, 3, 2, 128, 128, 64, gpu_attention::MaskKind::Padding},
      {h, 2, 2, 65, 129, 64, gpu_attention::MaskKind::Full, true, false},
      {b, 1, 4, 200, 130, 128, gpu_attention::MaskKind::Full, true, true},
      {b, 2, 3, 70, 70, 64, gpu_attention::MaskKind::None, false, false,
       gpu_attention::Layout::HeadsOfRows},
      {h, 2, 4, 33, 90, 32, gpu_attention::MaskKind::None, false, true,
       gpu_attention::Layout::Contiguous, 1},
      {b, 1, 2, 50, 64, 96, gpu_attention::MaskKind::None, false, false,
       gpu_attention::Layout::Offset},
      {b, 1, 1, 1, 300, 128},
      {h, 1, 2, 17, 17, 16, gpu_attention::MaskKind::None, false, true},
      {b, 1, 2, 40, 40, 64, gpu_attention::MaskKind::None, false, false,
       gpu_attention::Layout::Contiguous, 0, true},
      // The f32 kernels (tiled for head dims 32 and 64, a row a thread for the other multiples
      // of 4 up to 64): masks, a bias, the causal cut, lengths off their tiles (64 rows and
      // keys; 128 rows and 16 keys), heads of [B, S, H, D], rows off 16 bytes (copied), one key
      // head for many query heads, NaN inputs.
      {DType::F32, 2, 2, 70, 50, 64, gpu_attention::MaskKind::Padding, true, false},
      {DType::F32, 2, 3, 129, 100, 32, gpu_attention::MaskKind::Full, true, true},
      {DType::F32, 1, 2, 200, 130, 64, gpu_attention::MaskKind::None, false, true},
      {DType::F32, 2, 3, 70, 70, 32, gpu_attention::MaskKind::Padding, false, false,
       gpu_attention::Layout::HeadsOfRows},
      {DType::F32, 1, 2, 50, 33, 60, gpu_attention::MaskKind::None, true, false,
       gpu_attention::Layout::Offset},
      {DType::F32, 1, 2, 50, 33, 64, gpu_attention::MaskKind::Padding, false, false,
       gpu_attention::Layout::Offset},
      {DType::F32, 2, 4, 33, 90, 4, gpu_attention::MaskKind::None, false, true,
       gpu_attention::Layout::Contiguous, 1},
      {DType::F32, 1, 2, 40, 40, 64, gpu_attention::MaskKind::None, false, false,
       gpu_attention::Layout::Contiguous, 0, true},
      {DType::F32, 1, 1, 1, 300, 16},
      // The default's composition: f32 past the f32 kernel's head dims, f64, and a head dim the
      // 16-bit kernel does not take.
      {DType::F32, 1, 2, 30, 20, 72, gpu_attention::MaskKind::Padding, true, true},
      {DType::F64, 1, 2, 30, 20, 24, gpu_attention::MaskKind::None, false, true},
      {b, 1, 2, 30, 20, 72, gpu_attention::MaskKind::Full},
  };
  std::uint64_t seed = 900;
  for (const gpu_attention::AttentionCase& c : cases) {
    SCOPED_TRACE(gpu_attention::describe(c));
    gpu_attention::check_case(device, c, seed += 10);
  }
}

TEST(GpuAttention, LongSequencesMatchTheReference) {
  KILN_REQUIRE_GPU();
  // Many key blocks per query block, both sides of the causal diagonal.
  gpu_attention::check_case(
      device, {DType::BF16, 1, 1, 1000, 1000, 128, gpu_attention::MaskKind::None, false, true}, 77);
  gpu_attention::check_case(device, {DType::F16, 1, 2, 300, 1500, 64}, 78);
  gpu_attention::check_case(
      device, {DType::F32, 1, 2, 1000, 1000, 64, gpu_attention::MaskKind::None, false, true}, 79);
}

// The f32 kernel's output is a [B, H, Sq, D] view of [B, Sq, H, D] memory: merging the heads back
// is a view of contiguous memory, and the view reads as the values it names.
TEST(GpuAttention, F32OutputMergesItsHeadsWithoutACopy) {
  KILN_REQUIRE_GPU();
  const gpu_attention::AttentionCase c{DType::F32, 2, 3, 45, 45, 32};
  const gpu_attention::Inputs in = gpu_attention::make_inputs(c, 555);
  const AttentionOptions options{.scale = std::nullopt, .is_causal = false};
  const Primitive out = detail::attention(on(in.q, device), on(in.k, device), on(in.v, device),
                                          std::nullopt, std::nullopt, options);
  EXPECT_EQ(out->shape(), (Shape{2, 3, 45, 32}));
  const Primitive merged = detail::swap_dims(out, 1, 2);
  const auto* strided = dynamic_cast<const StridedTensor*>(merged.get());
  ASSERT_NE(strided, nullptr);
  EXPECT_TRUE(strided->is_contiguous());
  gpu_attention::expect_matches(c, in, detail::into_data(out));
  // [B, Sq, H * D] as a reshape of the merged view, read back as the heads it holds.
  const Primitive rows = detail::reshape(merged, Shape{2, 45, 96}, 3);
  const std::vector<double> a = detail::into_data(out).to_f64_vec();
  const std::vector<double> r = detail::into_data(rows).to_f64_vec();
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t h = 0; h < 3; ++h) {
      for (std::int64_t i = 0; i < 45; ++i) {
        for (std::int64_t d = 0; d < 32; ++d) {
          ASSERT_EQ(a[((b * 3 + h) * 45 + i) * 32 + d], r[(b * 45 + i) * 96 + h * 32 + d]);
        }
      }
    }
  }
}

TEST(GpuAttention, BackwardMatchesFloat64Reference) {
  KILN_REQUIRE_GPU();
  using gpu_attention::Layout;
  using gpu_attention::MaskKind;
  const DType b = DType::BF16, h = DType::F16;
  const gpu_attention::AttentionCase cases[] = {
      {b, 1, 2, 130, 150, 64, MaskKind::None, false, true},
      {h, 2, 1, 70, 90, 32, MaskKind::Full, true, false},
      {b, 1, 1, 300, 300, 128, MaskKind::None, false, true},
      {h, 2, 2, 33, 90, 16, MaskKind::None, false, true, Layout::Contiguous, 1},
      {b, 3, 2, 20, 70, 64, MaskKind::Padding},
      {b, 2, 3, 70, 70, 64, MaskKind::None, false, false, Layout::HeadsOfRows},
      {b, 1, 2, 50, 64, 96, MaskKind::None, false, false, Layout::Offset},
      // The default's composition: f32 (its forward's output a view, from the f32 kernel), and a
      // head dim the kernels do not take.
      {DType::F32, 2, 2, 30, 20, 64, MaskKind::Padding, true, true},
      {DType::F32, 1, 3, 40, 50, 32, MaskKind::None, false, false, Layout::HeadsOfRows},
      {b, 1, 2, 30, 20, 72, MaskKind::Full},
  };
  std::uint64_t seed = 1300;
  for (const gpu_attention::AttentionCase& c : cases) {
    SCOPED_TRACE(gpu_attention::describe(c));
    gpu_attention::check_backward_case(device, c, seed += 10);
  }
}

// The backward ops given the forward's output use the statistics it kept only for the q, k, mask,
// bias and options it was made from: with another q (values and storage) they equal the
// backward of an output that kept nothing (a copy), where the statistics are recomputed from
// that q; and both passes' statistics give the reference's gradients above. A dq computed by
// the key/value op is taken only for its own output gradient.
TEST(GpuAttention, BackwardUsesKeptStatisticsOnlyForTheirInputs) {
  KILN_REQUIRE_GPU();
  using gpu_attention::MaskKind;
  const gpu_attention::AttentionCase cases[] = {
      {DType::BF16, 1, 2, 130, 150, 64, MaskKind::None, false, true},
      {DType::F16, 2, 1, 70, 90, 128, MaskKind::Full, true, false},
  };
  std::uint64_t seed = 1500;
  for (const gpu_attention::AttentionCase& c : cases) {
    SCOPED_TRACE(gpu_attention::describe(c));
    gpu_attention::check_backward_case(device, c, seed += 10, /*copy_output=*/true);
    const gpu_attention::Inputs in = gpu_attention::make_inputs(c, seed + 1);
    const AttentionOptions options{.scale = std::nullopt, .is_causal = c.causal};
    const Primitive q = on(in.q, device), k = on(in.k, device), v = on(in.v, device);
    const Primitive other_q =
        on(test::host_random(in.q->shape(), c.dtype, seed + 2, -2, 2), device);
    const std::optional<Primitive> mask =
        in.mask ? std::optional<Primitive>(on(*in.mask, device)) : std::nullopt;
    const std::optional<Primitive> bias =
        in.bias ? std::optional<Primitive>(on(*in.bias, device)) : std::nullopt;
    const Primitive out = detail::attention(q, k, v, mask, bias, options);
    const Primitive copy = on(on(out, Device::cpu()), device);
    const Primitive grad = on(test::host_random(out->shape(), c.dtype, seed + 3, -1, 1), device);
    Backend& backend = backend_for(device);
    const Primitive dq_kept = backend.attention_query_backward(other_q, k, v, out, grad, mask, bias,
                                                               std::nullopt, options);
    const Primitive dq_copy = backend.attention_query_backward(other_q, k, v, copy, grad, mask,
                                                               bias, std::nullopt, options);
    EXPECT_EQ(detail::into_data(dq_kept).to_f64_vec(), detail::into_data(dq_copy).to_f64_vec());
    const auto [dk_kept, dv_kept] = backend.attention_key_value_backward(
        other_q, k, v, out, grad, mask, bias, std::nullopt, options);
    const auto [dk_copy, dv_copy] = backend.attention_key_value_backward(
        other_q, k, v, copy, grad, mask, bias, std::nullopt, options);
    EXPECT_EQ(detail::into_data(dk_kept).to_f64_vec(), detail::into_data(dk_copy).to_f64_vec());
    EXPECT_EQ(detail::into_data(dv_kept).to_f64_vec(), detail::into_data(dv_copy).to_f64_vec());
    // A dq the key/value op left for one output gradient is not another's.
    const Primitive other_grad =
        on(test::host_random(out->shape(), c.dtype, seed + 4, -1, 1), device);
    (void)backend.attention_key_value_backward(q, k, v, out, grad, mask, bias, std::nullopt,
                                               options);
    const Primitive dq_other = backend.attention_query_backward(q, k, v, out, other_grad, mask,
                                                                bias, std::nullopt, options);
    const Primitive dq_other_copy = backend.attention_query_backward(
        q, k, v, copy, other_grad, mask, bias, std::nullopt, options);
    gpu_attention::expect_near(detail::into_data(dq_other).to_f64_vec(),
                               detail::into_data(dq_other_copy).to_f64_vec(), c.dtype,
                               "dq for another output gradient");
  }
}
