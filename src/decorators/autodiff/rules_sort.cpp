// Backward rules of sorting: the sorted values are a permutation (or, for topk, a selection) of
// x along dim, so their gradient is scattered back through the indices the sort returned.
#include "decorators/autodiff/rules.h"

namespace kiln::autodiff {
namespace {

// Records values (computed together with indices on the inner backend) as a function of x
// whose gradient goes back through indices.
template <class Forward>
Primitive through_indices(AutodiffBackend& self, const char* op, Primitive x, std::int64_t dim,
                          Primitive values, Primitive indices, Forward forward) {
  const Shape shape = x->shape();
  return self.record<1>(
      op, Cost::Stored, {std::move(x)}, kKeepNone, std::move(forward),
      [shape, dim, indices](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive zeros = b.zeros(shape, g->dtype(), g->device());
        if (g->shape().num_elements() == 0) return {zeros};
        return {b.scatter(dim, std::move(zeros), indices, std::move(g), IndexingUpdate::Add)};
      },
      std::move(values));
}

}  // namespace

Primitive AutodiffBackend::sort(Primitive x, std::int64_t dim, bool descending) {
  if (!node_of(x)) return AutodiffPassthrough::sort(std::move(x), dim, descending);
  auto [values, indices] = inner().sort_with_indices(inner_of(x), dim, descending, DType::I64);
  return through_indices(*this, "sort", std::move(x), dim, std::move(values), std::move(indices),
                         [dim, descending](Backend& b, Inputs<1> in) {
                           return b.sort(std::move(in[0]), dim, descending);
                         });
}

PrimitivePair AutodiffBackend::sort_with_indices(Primitive x, std::int64_t dim, bool descending,
                                                 DType index_dtype) {
  if (!node_of(x)) {
    return AutodiffPassthrough::sort_with_indices(std::move(x), dim, descending, index_dtype);
  }
  auto [values, indices] = inner().sort_with_indices(inner_of(x), dim, descending, index_dtype);
  Primitive recorded =
      through_indices(*this, "sort_with_indices", std::move(x), dim, std::move(values), indices,
                      [dim, descending](Backend& b, Inputs<1> in) {
                        return b.sort(std::move(in[0]), dim, descending);
                      });
  return {std::move(recorded), wrap(std::move(indices))};
}

PrimitivePair AutodiffBackend::topk_with_indices(Primitive x, std::int64_t k, std::int64_t dim,
                                                 bool largest, DType index_dtype) {
  if (!node_of(x)) {
    return AutodiffPassthrough::topk_with_indices(std::move(x), k, dim, largest, index_dtype);
  }
  auto [values, indices] = inner().topk_with_indices(inner_of(x), k, dim, largest, index_dtype);
  Primitive recorded = through_indices(
      *this, "topk_with_indices", std::move(x), dim, std::move(values), indices,
      [k, dim, largest, index_dtype](Backend& b, Inputs<1> in) {
        return b.topk_with_indices(std::move(in[0]), k, dim, largest, index_dtype).first;
      });
  return {std::move(recorded), wrap(std::move(indices))};
}

}  // namespace kiln::autodiff
