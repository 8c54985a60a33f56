#include "contract/defaults/attention_grads.h"

#include <algorithm>
#include <cmath>

#include "contract/attention_dropout.h"
#include "contract/defaults/compose.h"

namespace kiln::defaults {

namespace {

// mix64 (contract/random_stream.h) element by element on a U64 tensor.
Primitive mixed(Backend& b, Primitive x) {
  x = b.add_scalar(std::move(x), Scalar(std::uint64_t{0x9e3779b97f4a7c15ull}));
  x = b.mul_scalar(b.bitwise_xor(x, b.bitwise_right_shift_scalar(x, Scalar(30))),
                   Scalar(std::uint64_t{0xbf58476d1ce4e5b9ull}));
  x = b.mul_scalar(b.bitwise_xor(x, b.bitwise_right_shift_scalar(x, Scalar(27))),
                   Scalar(std::uint64_t{0x94d049bb133111ebull}));
  return b.bitwise_xor(x, b.bitwise_right_shift_scalar(x, Scalar(31)));
}

// x with its last two dims swapped.
Primitive transposed(Backend& b, Primitive x) { return b.swap_dims(std::move(x), 2, 3); }

// The gradients for query rows [i0, i0 + rows): q, g (and a mask or bias with a query dim of
// their own) cut to those rows. Returns dq, the block's share of dk and dv, and ds (the scores'
// gradient, for the bias).
struct BlockGrads {
  Primitive dq, dk, dv, ds;
};
BlockGrads attention_block(Backend& b, const Primitive& q, const Primitive& k, const Primitive& v,
                           const OptionalPrimitive& bias, const OptionalPrimitive& mask,
                           const OptionalPrimitive& dropout_seed, const Primitive& g,
                           std::int64_t i0, std::int64_t queries, const AttentionOptions& options,
                           double factor, const Shape& score_shape, AttentionGradsWanted wanted) {
  Primitive scores = b.mul_scalar(b.matmul(q, transposed(b, k)), factor);
  if (bias) scores = b.add(std::move(scores), *bias);
  scores = expand_to(b, std::move(scores), score_shape);
  if (mask) scores = b.mask_fill(std::move(scores), expand_to(b, *mask, score_shape), -kInfinity);
  if (options.is_causal) {
    const std::int64_t queries = score_shape[2], keys = score_shape[3];
    const Device device = scores->device();
    const Shape square{1, 1, queries, keys};
    Primitive rows =
        b.reshape(b.arange(i0, i0 + queries, 1, DType::I64, device), Shape{1, 1, queries, 1});
    Primitive cols = b.reshape(b.arange(0, keys, 1, DType::I64, device), Shape{1, 1, 1, keys});
    Primitive future =
        b.greater(b.expand(std::move(cols), square), b.expand(std::move(rows), square));
    scores =
        b.mask_fill(std::move(scores), expand_to(b, std::move(future), score_shape), -kInfinity);
  }
  // A row whose keys are all excluded has zero weights in the forward pass (its output is zeros),
  // so it passes no gradient; softmax would make it NaN. NaN scores still propagate.
  std::optional<Primitive> cut_off;
  if (mask || bias || options.is_causal) {
    cut_off = expand_to(b, b.equal_elem(b.max_dim(scores, 3), Scalar(-kInfinity)), score_shape);
  }
  Primitive p = b.softmax(std::move(scores), 3);
  if (cut_off) p = b.mask_fill(std::move(p), std::move(*cut_off), Scalar(0.0));
  OptionalPrimitive kept;
  if (dropout_seed) {
    kept = attention_dropout_multiplier(b, *dropout_seed, score_shape, i0, queries, options.dropout,
                                        p->dtype());
  }
  BlockGrads out;
  if (wanted.dv) out.dv = b.matmul(transposed(b, kept ? b.mul(p, *kept) : p), g);
  if (!wanted.dq && !wanted.dk && !wanted.dbias) return out;
  Primitive dp = b.matmul(g, transposed(b, v));
  if (kept) dp = b.mul(std::move(dp), *kept);
  Primitive ds = b.mul(p, b.sub(dp, b.sum_dim(b.mul(dp, p), 3)));
  if (wanted.dq) out.dq = b.mul_scalar(b.matmul(ds, k), factor);
  if (wanted.dk) out.dk = b.mul_scalar(b.matmul(transposed(b, ds), q), factor);
  if (wanted.dbias) out.ds = std::move(ds);
  return out;
}

// x's rows [i0, i0 + rows) along dim 2, or x itself when that dim is broadcast (size 1).
Primitive query_rows(Backend& b, const Primitive& x, std::int64_t i0, std::int64_t rows) {
  if (x->shape()[2] == 1) return x;
  return slice_dim(b, x, 2, i0, rows);
}

}  // namespace

Primitive attention_dropout_multiplier(Backend& b, const Primitive& seed, const Shape& scores,
                                       std::int64_t row0, std::int64_t queries, double p,
                                       DType dtype) {
  const Device device = seed->device();
  if (scores.num_elements() == 0) return b.full(scores, Scalar(0.0), dtype, device);
  const std::int64_t heads = scores[0] * scores[1], rows = scores[2], keys = scores[3];
  // Element (bh, i, j)'s index (bh * queries + row0 + i) * keys + j, as U64 (it wraps in the
  // hash's products).
  auto steps = [&](std::int64_t start, std::int64_t count, std::int64_t stride, Shape shape) {
    Primitive r = b.cast(b.arange(start, start + count, 1, DType::I64, device), DType::U64);
    if (stride != 1) r = b.mul_scalar(std::move(r), Scalar(static_cast<std::uint64_t>(stride)));
    return expand_to(b, b.reshape(std::move(r), std::move(shape)), scores);
  };
  Primitive index = b.add(steps(0, heads, queries * keys, Shape{scores[0], scores[1], 1, 1}),
                          steps(row0, rows, keys, Shape{1, 1, rows, 1}));
  index = b.add(std::move(index), steps(0, keys, 1, Shape{1, 1, 1, keys}));
  Primitive key = b.reshape(mixed(b, b.cast(seed, DType::U64)), Shape{1, 1, 1, 1});
  Primitive bits = mixed(b, b.bitwise_xor(std::move(index), expand_to(b, std::move(key), scores)));
  const AttentionDropout dropout(p);
  Primitive kept = b.greater_equal_elem(
      b.bitwise_right_shift_scalar(std::move(bits), Scalar(kAttentionDropoutShift)),
      Scalar(static_cast<std::uint64_t>(dropout.threshold)));
  return b.mul_scalar(b.cast(std::move(kept), dtype), Scalar(static_cast<double>(dropout.scale)));
}

std::int64_t& attention_backward_score_budget() noexcept {
  static std::int64_t budget = std::int64_t{1} << 24;
  return budget;
}

AttentionGrads attention_grads(Backend& b, const Primitive& query, const Primitive& key,
                               const Primitive& value, const OptionalPrimitive& mask,
                               const OptionalPrimitive& bias, const OptionalPrimitive& dropout_seed,
                               const Primitive& output_grad, const AttentionOptions& options,
                               AttentionGradsWanted wanted) {
  const DType dtype = output_grad->dtype();
  const Shape q_shape = query->shape(), k_shape = key->shape(), v_shape = value->shape();
  const std::int64_t depth = q_shape[3];
  const double factor =
      options.scale.value_or(depth > 0 ? 1.0 / std::sqrt(static_cast<double>(depth)) : 1.0);
  Primitive q = to_compute(b, query);
  Primitive k = to_compute(b, key);
  Primitive v = to_compute(b, value);
  OptionalPrimitive bias_c;
  if (bias) bias_c = to_compute(b, *bias);
  Primitive gc = to_compute(b, output_grad);
  // The scores span the batch and head dims of value too (the output's).
  const std::int64_t batch = std::max({q_shape[0], k_shape[0], v_shape[0]});
  const std::int64_t heads = std::max({q_shape[1], k_shape[1], v_shape[1]});
  const std::int64_t sq = q_shape[2], sk = k_shape[2];
  const std::int64_t per_row = std::max<std::int64_t>(1, batch * heads * sk);
  const std::int64_t block = std::clamp<std::int64_t>(attention_backward_score_budget() / per_row,
                                                      1, std::max<std::int64_t>(sq, 1));
  const bool need_ds = bias.has_value() && wanted.dbias;
  wanted.dbias = need_ds;
  PrimitiveList dq_blocks, ds_blocks;
  Primitive dk, dv, ds_sum;
  for (std::int64_t i0 = 0; i0 < std::max<std::int64_t>(sq, 1); i0 += block) {
    const std::int64_t rows = std::min(block, sq - i0);
    const Shape score_shape{batch, heads, rows, sk};
    OptionalPrimitive block_mask, block_bias;
    if (mask) block_mask = query_rows(b, *mask, i0, rows);
    if (bias_c) block_bias = query_rows(b, *bias_c, i0, rows);
    BlockGrads grads =
        attention_block(b, query_rows(b, q, i0, rows), k, v, block_bias, block_mask, dropout_seed,
                        query_rows(b, gc, i0, rows), i0, sq, options, factor, score_shape, wanted);
    if (grads.dq) dq_blocks.push_back(std::move(grads.dq));
    if (grads.dk) dk = dk ? b.add(std::move(dk), std::move(grads.dk)) : std::move(grads.dk);
    if (grads.dv) dv = dv ? b.add(std::move(dv), std::move(grads.dv)) : std::move(grads.dv);
    if (need_ds) {
      Shape bias_rows = (*bias)->shape();
      if (bias_rows[2] != 1) bias_rows[2] = rows;
      Primitive reduced = reduce_to(b, std::move(grads.ds), bias_rows);
      if ((*bias)->shape()[2] != 1) {
        ds_blocks.push_back(std::move(reduced));
      } else {
        ds_sum = ds_sum ? b.add(std::move(ds_sum), std::move(reduced)) : std::move(reduced);
      }
    }
    if (sq == 0) break;
  }
  auto joined = [&](PrimitiveList blocks) {
    return blocks.size() == 1 ? std::move(blocks[0]) : b.cat(std::move(blocks), 2);
  };
  AttentionGrads out;
  if (wanted.dq)
    out.dq = from_compute(b, reduce_to(b, joined(std::move(dq_blocks)), q_shape), dtype);
  if (wanted.dk) out.dk = from_compute(b, reduce_to(b, std::move(dk), k_shape), dtype);
  if (wanted.dv) out.dv = from_compute(b, reduce_to(b, std::move(dv), v_shape), dtype);
  if (need_ds) {
    out.dbias = from_compute(b, ds_sum ? std::move(ds_sum) : joined(std::move(ds_blocks)), dtype);
  }
  return out;
}

}  // namespace kiln::defaults
