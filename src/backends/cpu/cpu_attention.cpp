// Scaled dot-product attention: per (batch, head) and block of query rows,
// scores = scale * q k^T + bias, masked, softmax over keys, times v. Two gemms per block; the
// score block stays bounded, so long sequences never allocate [Sq, Sk] at once. The softmax's
// division comes last: the unnormalised weights times v, each output row then divided by its
// weights' sum.
//
// Masking: a true mask entry, or (is_causal) a key after the query (j > i, top-left aligned as
// in PyTorch), is excluded. A row with every key excluded gets all-zero weights, so its output
// is zeros, not NaN (PyTorch's math path does the same since 2.5). NaN scores propagate.
//
// Dropout multiplies each weight by 0 or 1 / (1 - p) after the exponentials, the mask made from
// the seed element by element (contract/attention_dropout.h); the row's sum, taken before, still
// divides the output.
#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/vector_math.h"
#include "contract/attention_dropout.h"
#include "core/buffer.h"

namespace kiln {

using namespace cpu;

namespace {

// Score elements a block may hold (1M: 4 MB of f32).
constexpr std::int64_t kScoreBudget = std::int64_t{1} << 20;

// Strides of a rank-4 operand over [B, H, rows, cols] (0 along its broadcast dims).
Strides strides4(const CpuTensor& x) {
  Strides s(4);
  for (std::size_t d = 0; d < 4; ++d) s[d] = x.shape()[d] == 1 ? 0 : x.strides()[d];
  return s;
}

template <class T>
struct AttentionArgs {
  const CpuTensor* q;
  const CpuTensor* k;
  const CpuTensor* v;
  const CpuTensor* mask;  // Bool, may be null
  const CpuTensor* bias;  // T, may be null
  T scale;
  bool causal;
  CpuTensor* out;  // contiguous [B, H, Sq, Dv], T
  std::optional<AttentionDropout> dropout;
  std::uint64_t dropout_key = 0;
};

template <class T>
void attention_kernel(const AttentionArgs<T>& args) {
  const Shape& os = args.out->shape();
  const std::int64_t batch = os[0], heads = os[1], sq = os[2], dv = os[3];
  const std::int64_t sk = args.k->shape()[2], d = args.q->shape()[3];
  const Strides qs = strides4(*args.q), ks = strides4(*args.k), vs = strides4(*args.v);
  const Strides ms = args.mask ? strides4(*args.mask) : Strides(4, 0);
  const Strides bs = args.bias ? strides4(*args.bias) : Strides(4, 0);
  const bool* mask = args.mask ? args.mask->template data_as<const bool>() : nullptr;
  const T* bias = args.bias ? args.bias->template data_as<const T>() : nullptr;
  T* out = args.out->template data_as<T>();

  // Rows per block. With a (batch, head) for every thread, a block is a whole head (within the
  // score budget), each on one thread: fewer, larger products. Otherwise small enough that each
  // gemm stays on one OpenBLAS thread, so blocks can run in parallel; when even one row is too
  // much work, blocks run in turn and BLAS threads them.
  const std::int64_t row_work = std::max<std::int64_t>(1, sk * std::max({d, dv, std::int64_t{1}}));
  const std::int64_t budget_rows =
      std::max<std::int64_t>(1, kScoreBudget / std::max<std::int64_t>(sk, 1));
  const std::int64_t serial_rows = kBlasSingleThreadWork / row_work;
  const bool whole_heads = batch * heads >= thread_count();
  const bool parallel_blocks = whole_heads || serial_rows >= 8;
  const std::int64_t block =
      std::min({sq, budget_rows, !whole_heads && parallel_blocks ? serial_rows : sq});
  const std::int64_t blocks_per_head = (sq + block - 1) / block;
  const std::int64_t tasks = batch * heads * blocks_per_head;

  auto run = [&](std::int64_t task, detail::Buffer<T>& scores, detail::Buffer<T>& inverse) {
    const std::int64_t bh = task / blocks_per_head;
    const std::int64_t b = bh / heads, h = bh % heads;
    const std::int64_t i0 = (task % blocks_per_head) * block;
    const std::int64_t rows = std::min(block, sq - i0);
    scores.resize(static_cast<std::size_t>(rows * sk));
    inverse.resize(static_cast<std::size_t>(rows));
    const T* qp = args.q->template data_as<const T>() + b * qs[0] + h * qs[1] + i0 * qs[2];
    const T* kp = args.k->template data_as<const T>() + b * ks[0] + h * ks[1];
    const T* vp = args.v->template data_as<const T>() + b * vs[0] + h * vs[1];
    T* op = out + ((b * heads + h) * sq + i0) * dv;
    // scores = scale * q k^T (k read transposed through its strides).
    gemm<T>({qp, rows, d, qs[2], qs[3]}, {kp, d, sk, ks[3], ks[2]},
            {scores.data(), rows, sk, sk, 1}, args.scale, T(0));
    auto softmax_rows = [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        const std::int64_t i = i0 + r;
        T* s = scores.data() + r * sk;
        const bool* mrow = mask ? mask + b * ms[0] + h * ms[1] + i * ms[2] : nullptr;
        const T* brow = bias ? bias + b * bs[0] + h * bs[1] + i * bs[2] : nullptr;
        const std::int64_t visible = args.causal ? std::min(sk, i + 1) : sk;
        constexpr T kExcluded = -std::numeric_limits<T>::infinity();
        T max = kExcluded;
        if ((!brow || bs[3] == 1) && (!mrow || ms[3] == 1)) {
          // Contiguous rows: a vector pass each (one loop doing all three, with the running
          // maximum, stayed scalar: a quarter of the op's time).
          if (brow) {
            for (std::int64_t j = 0; j < sk; ++j) s[j] += brow[j];
          }
          if (mrow) fill_where(s, mrow, sk, kExcluded);
          for (std::int64_t j = visible; j < sk; ++j) s[j] = kExcluded;
          max = lanes_max(s, sk);
        } else {
          for (std::int64_t j = 0; j < sk; ++j) {
            T v = s[j];
            if (brow) v += brow[j * bs[3]];
            if (j >= visible || (mrow && mrow[j * ms[3]])) v = kExcluded;
            s[j] = v;
            if (v > max) max = v;
          }
        }
        if (max == kExcluded) {
          // Every key excluded: zero weights (NaN scores in the row still propagate).
          for (std::int64_t j = 0; j < sk; ++j) s[j] = s[j] == kExcluded ? T(0) : s[j] * T(0);
          inverse[static_cast<std::size_t>(r)] = T(1);
          continue;
        }
        // The exponentials and their sum: libmvec's vector exp for f32 (vector_math.h).
        double sum = 0;
        bool done = false;
        if constexpr (std::is_same_v<T, float>) done = vector_exp_sum(s, max, s, sk, sum);
        if (!done) {
          for (std::int64_t j = 0; j < sk; ++j) {
            s[j] = std::exp(s[j] - max);
            sum += static_cast<double>(s[j]);
          }
        }
        // The weights stay unnormalised: their sum divides the row's output once the product
        // has made it (dv values a row, not sk; and the next row's exponentials need not wait
        // for this row's division).
        inverse[static_cast<std::size_t>(r)] = static_cast<T>(1.0 / sum);
        if (args.dropout) {
          const AttentionDropout& dropout = *args.dropout;
          const auto first = static_cast<std::uint64_t>(((b * heads + h) * sq + i) * sk);
          const T kept = static_cast<T>(dropout.scale);
          for (std::int64_t j = 0; j < sk; ++j) {
            s[j] *= dropout.keeps(args.dropout_key, first + static_cast<std::uint64_t>(j)) ? kept
                                                                                           : T(0);
          }
        }
      }
    };
    parallel_for(rows, std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(sk, 1)),
                 softmax_rows);
    // out = weights v, each row divided by its weights' sum
    gemm<T>({scores.data(), rows, sk, sk, 1}, {vp, sk, dv, vs[2], vs[3]}, {op, rows, dv, dv, 1},
            T(1), T(0));
    for (std::int64_t r = 0; r < rows; ++r) {
      const T inv = inverse[static_cast<std::size_t>(r)];
      T* row = op + r * dv;
      for (std::int64_t j = 0; j < dv; ++j) row[j] *= inv;
    }
  };

  if (parallel_blocks && tasks > 1) {
    // Tiny heads stay on one thread.
    const std::int64_t grain = std::max<std::int64_t>(1, kMinThreadWork / (block * row_work));
    parallel_for(tasks, grain, [&](std::int64_t begin, std::int64_t end) {
      detail::Buffer<T> scores, inverse;
      for (std::int64_t t = begin; t < end; ++t) run(t, scores, inverse);
    });
  } else {
    detail::Buffer<T> scores, inverse;
    for (std::int64_t t = 0; t < tasks; ++t) run(t, scores, inverse);
  }
}

}  // namespace

Primitive CpuBackend::attention(Primitive query, Primitive key, Primitive value,
                                OptionalPrimitive mask, OptionalPrimitive bias,
                                OptionalPrimitive dropout_seed, AttentionOptions options) {
  const DType dtype = query->dtype();
  const Shape& qs = query->shape();
  const Shape& vs = value->shape();
  // Broadcast sizes (the tensor layer checked they agree or are 1): a 0 beside a 1 is 0.
  auto broadcast = [](std::initializer_list<std::int64_t> sizes) {
    std::int64_t out = 1;
    for (std::int64_t n : sizes) {
      if (n != 1) out = n;
    }
    return out;
  };
  const std::int64_t batch = broadcast({qs[0], key->shape()[0], vs[0]});
  const std::int64_t heads = broadcast({qs[1], key->shape()[1], vs[1]});
  const Shape out_shape{batch, heads, qs[2], vs[3]};
  auto out = make_tensor(dtype, out_shape);
  if (out_shape.num_elements() == 0) return out;
  const std::int64_t depth = qs[3];
  const double scale = options.scale
                           ? *options.scale
                           : (depth > 0 ? 1.0 / std::sqrt(static_cast<double>(depth)) : 1.0);
  const CpuTensor* m = mask ? &as_cpu(*mask) : nullptr;
  const CpuTensor* b = bias ? &as_cpu(*bias) : nullptr;
  std::optional<AttentionDropout> dropout;
  std::uint64_t dropout_key = 0;
  if (dropout_seed) {
    dropout.emplace(options.dropout);
    dropout_key = AttentionDropout::key(*contiguous(*dropout_seed)->data_as<const std::int64_t>());
  }
  if (dtype == DType::F32) {
    attention_kernel<float>({&as_cpu(query), &as_cpu(key), &as_cpu(value), m, b,
                             static_cast<float>(scale), options.is_causal, out.get(), dropout,
                             dropout_key});
    return out;
  }
  if (dtype == DType::F64) {
    attention_kernel<double>({&as_cpu(query), &as_cpu(key), &as_cpu(value), m, b, scale,
                              options.is_causal, out.get(), dropout, dropout_key});
    return out;
  }
  // 16-bit floats: compute in f32, round once.
  auto q = contiguous_as(query, DType::F32);
  auto k = contiguous_as(key, DType::F32);
  auto v = contiguous_as(value, DType::F32);
  std::shared_ptr<CpuTensor> bf = bias ? contiguous_as(*bias, DType::F32) : nullptr;
  auto result = make_tensor(DType::F32, out_shape);
  attention_kernel<float>({q.get(), k.get(), v.get(), m, bf.get(), static_cast<float>(scale),
                           options.is_causal, result.get(), dropout, dropout_key});
  round_from_f32(*result, *out);
  return out;
}

}  // namespace kiln
