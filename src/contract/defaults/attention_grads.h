// attention's gradients composed of other ops: the defaults of attention_query_backward and
// attention_key_value_backward, and autodiff's rule where a backend's backward ops do not serve
// (the bias's gradient, and second derivatives, whose backward pass is itself recorded). The
// weights are recomputed from q and k (in f32 for 16-bit floats) a block of query rows at a time,
// so the pass never holds the whole [B, H, Sq, Sk] matrix, and dS = P (dP - Σ dP P), dP = g vᵀ.
#pragma once

#include <cstdint>

#include "contract/backend.h"

namespace kiln::defaults {

struct AttentionGrads {
  Primitive dq, dk, dv, dbias;  // null where not asked for
};
struct AttentionGradsWanted {
  bool dq = false, dk = false, dv = false, dbias = false;
};

// The gradients of out = attention(query, key, value, mask, bias, dropout_seed, options) for
// output_grad, each in its operand's dtype and shape (summed over the dims the operand
// broadcast). With dropout the weights' mask is remade from the seed: dV = (P∘M)ᵀ g and
// dP = (g vᵀ)∘M, M the mask times 1 / (1 - p).
AttentionGrads attention_grads(Backend& b, const Primitive& query, const Primitive& key,
                               const Primitive& value, const OptionalPrimitive& mask,
                               const OptionalPrimitive& bias, const OptionalPrimitive& dropout_seed,
                               const Primitive& output_grad, const AttentionOptions& options,
                               AttentionGradsWanted wanted);

// Attention dropout's multiplier composed of ops (contract/attention_dropout.h): for the scores
// of query rows [row0, row0 + scores[2]) of `queries` (scores [B, H, rows, Sk] over the broadcast
// batch and head dims), 1 / (1 - p) where a weight is kept and 0 where it is dropped, in dtype.
Primitive attention_dropout_multiplier(Backend& b, const Primitive& seed, const Shape& scores,
                                       std::int64_t row0, std::int64_t queries, double p,
                                       DType dtype);

// Score elements (over every batch and head) one block of query rows may hold: 16M, 64 MB of
// f32. Longer sequences are taken in blocks of query rows, so the pass never holds the whole
// [B, H, Sq, Sk] matrix (4 GB for 16 heads of 4096 tokens in a batch of 4): its memory grows with
// the sequence, not with its square. A variable so that tests can cut small problems into many
// blocks.
std::int64_t& attention_backward_score_budget() noexcept;

}  // namespace kiln::defaults
