// Gradcheck rows: layout ops (the gradient moved back by the inverse movement) and sorting (the
// gradient scattered back through the indices).
#include "conformance/gradcheck.h"

namespace kiln::conformance {

KILN_CONFORMANCE_ROW(grad_reshape_expand, ({"grad:reshape", "grad:expand"})) {
  for (Layout layout : kLayouts) {
    gradcheck(device, "reshape", {{Shape{3, 4}, layout}}, [](const Prims& in) {
      return detail::reshape(in[0], Shape{2, 6}, 2);
    });
    gradcheck(device, "reshape to 3-d", {{Shape{3, 4}, layout}}, [](const Prims& in) {
      return detail::reshape(in[0], Shape{2, 3, 2}, 3);
    });
    gradcheck(device, "expand", {{Shape{3, 1}, layout}}, [](const Prims& in) {
      return detail::expand(in[0], Shape{3, 4});
    });
  }
  gradcheck(device, "reshape empty", {{Shape{0, 3}}}, [](const Prims& in) {
    return detail::reshape(in[0], Shape{3, 0}, 2);
  });
  // New leading dims, and stretched dims of size 1 in the middle and at the end.
  gradcheck(device, "expand with leading dims", {{Shape{1, 3}}}, [](const Prims& in) {
    return detail::expand(in[0], Shape{2, 2, 3});
  });
  gradcheck(device, "expand 3-d", {{Shape{2, 1, 1}, Layout::Strided}}, [](const Prims& in) {
    return detail::expand(in[0], Shape{2, 3, 4});
  });
  gradcheck(device, "expand rank 1", {{Shape{4}}}, [](const Prims& in) {
    return detail::expand(in[0], Shape{3, 4});
  });
}

KILN_CONFORMANCE_ROW(grad_permute_flip, ({"grad:permute", "grad:swap_dims", "grad:flip"})) {
  for (Layout layout : kLayouts) {
    gradcheck(device, "permute", {{Shape{2, 3, 4}, layout}}, [](const Prims& in) {
      return detail::permute(in[0], {2, 0, 1});
    });
    gradcheck(device, "swap_dims", {{Shape{2, 3, 4}, layout}},
              [](const Prims& in) { return detail::swap_dims(in[0], 0, 2); });
    gradcheck(device, "flip", {{Shape{3, 4}, layout}},
              [](const Prims& in) { return detail::flip(in[0], {1}); });
  }
  gradcheck(device, "flip two axes", {{Shape{2, 3, 2}}}, [](const Prims& in) {
    return detail::flip(in[0], {0, 2});
  });
  // Followed by an op that reads memory order, so a wrong view would show.
  gradcheck(device, "permute then cumsum", {{Shape{3, 4}}}, [](const Prims& in) {
    return detail::cumsum(detail::permute(in[0], {1, 0}), 1);
  });
}

KILN_CONFORMANCE_ROW(grad_unfold, ({"grad:unfold"})) {
  for (Layout layout : kLayouts) {
    // Overlapping windows (step < size) along the last dim.
    gradcheck(device, "unfold overlapping", {{Shape{3, 5}, layout}},
              [](const Prims& in) { return detail::unfold(in[0], 1, 3, 1); });
  }
  // Windows with gaps between them (step > size), along the first dim and a middle one.
  gradcheck(device, "unfold with gaps", {{Shape{7, 2}}},
            [](const Prims& in) { return detail::unfold(in[0], 0, 2, 3); });
  gradcheck(device, "unfold 3-d", {{Shape{2, 5, 2}, Layout::Transposed}},
            [](const Prims& in) { return detail::unfold(in[0], 1, 2, 2); });
}

KILN_CONFORMANCE_ROW(grad_cat_repeat, ({"grad:cat", "grad:repeat_dim"})) {
  for (Layout layout : kLayouts) {
    gradcheck(device, "cat 0",
              {{Shape{2, 3}, layout}, {Shape{1, 3}}, {Shape{3, 3}, Layout::Transposed}},
              [](const Prims& in) { return detail::cat(in, 0); });
    gradcheck(device, "cat 1", {{Shape{2, 3}, layout}, {Shape{2, 1}}},
              [](const Prims& in) { return detail::cat(in, 1); });
    gradcheck(device, "repeat_dim 0", {{Shape{2, 3}, layout}},
              [](const Prims& in) { return detail::repeat_dim(in[0], 0, 3); });
    gradcheck(device, "repeat_dim 1", {{Shape{2, 3}, layout}},
              [](const Prims& in) { return detail::repeat_dim(in[0], 1, 2); });
  }
  gradcheck(device, "cat with an empty input", {{Shape{2, 3}}, {Shape{2, 0}}, {Shape{2, 2}}},
            [](const Prims& in) { return detail::cat(in, 1); });
  gradcheck(device, "cat with a constant", {{Shape{2, 3}}}, [](const Prims& in) {
    Primitive c = detail::full(Shape{2, 2}, 1.5, in[0]->dtype(), in[0]->device(), Kind::Float);
    return detail::cat({c, in[0], in[0]}, 1);
  });
  gradcheck(device, "repeat_dim 3-d", {{Shape{2, 2, 2}}},
            [](const Prims& in) { return detail::repeat_dim(in[0], 1, 3); });
  gradcheck(device, "repeat_dim 0 times", {{Shape{2, 3}}},
            [](const Prims& in) { return detail::repeat_dim(in[0], 1, 0); });
}

KILN_CONFORMANCE_ROW(grad_sort,
                     ({"grad:sort", "grad:sort_with_indices", "grad:topk_with_indices"})) {
  for (Layout layout : kLayouts) {
    for (std::int64_t dim : {0, 1}) {
      for (bool descending : {false, true}) {
        const std::string name = std::to_string(dim) + (descending ? " descending" : " ascending");
        gradcheck(device, "sort " + name, {{Shape{3, 4}, layout}},
                  [=](const Prims& in) { return detail::sort(in[0], dim, descending); });
        gradcheck(device, "sort_with_indices " + name, {{Shape{3, 4}, layout}},
                  [=](const Prims& in) {
                    return detail::sort_with_indices(in[0], dim, descending).first;
                  });
        gradcheck(device, "topk " + name, {{Shape{3, 4}, layout}}, [=](const Prims& in) {
          return detail::topk_with_indices(in[0], 2, dim, descending).first;
        });
      }
    }
  }
  gradcheck(device, "sort 3-d", {{Shape{2, 3, 2}}},
            [](const Prims& in) { return detail::sort(in[0], 1, false); });
  gradcheck(device, "topk 0", {{Shape{3, 4}}},
            [](const Prims& in) { return detail::topk_with_indices(in[0], 0, 1, true).first; });
  gradcheck(device, "sort empty", {{Shape{0, 3}}},
            [](const Prims& in) { return detail::sort(in[0], 1, false); });
}

}  // namespace kiln::conformance
