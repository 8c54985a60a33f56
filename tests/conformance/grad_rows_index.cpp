// Gradcheck rows: indexing. Indices repeat, so gathers must add their gradients and assignments
// must give it to the write that stayed (the last) and none to what they overwrote.
#include "conformance/gradcheck.h"

namespace kiln::conformance {
namespace {

Primitive bools(const std::vector<double>& values, const Shape& shape, const Primitive& like) {
  return make_primitive(values, shape, DType::Bool, Layout::Contiguous, like->device());
}

constexpr IndexingUpdate kAssign = IndexingUpdate::Assign;
constexpr IndexingUpdate kAdd = IndexingUpdate::Add;

}  // namespace

KILN_CONFORMANCE_ROW(grad_gather_scatter, ({"grad:gather", "grad:scatter"})) {
  for (Layout layout : kLayouts) {
    // Along dim 0 with repeats, and along dim 1 with indices narrower than x in dim 0.
    gradcheck(device, "gather 0", {{Shape{3, 4}, layout}}, [](const Prims& in) {
      return detail::gather(0, in[0], ints({2, 0, 1, 2, 2, 0, 0, 1}, Shape{2, 4}, in[0]));
    });
    gradcheck(device, "gather 1", {{Shape{3, 4}, layout}}, [](const Prims& in) {
      return detail::gather(1, in[0], ints({3, 3, 0, 1, 2, 1}, Shape{2, 3}, in[0]));
    });
  }
  for (IndexingUpdate update : {kAssign, kAdd}) {
    const std::string name = "scatter " + update_name(update);
    for (Layout layout : kLayouts) {
      // Column 0 writes row 1 twice; rows 0 and 2 of other columns are written once or never.
      gradcheck(device, name + " 0", {{Shape{3, 4}, layout}, {Shape{2, 4}, Layout::Transposed}},
                [update](const Prims& in) {
                  return detail::scatter(
                      0, in[0], ints({1, 0, 2, 2, 1, 2, 2, 2}, Shape{2, 4}, in[0]), in[1], update);
                });
    }
    gradcheck(device, name + " 1", {{Shape{3, 4}}, {Shape{2, 3}}}, [update](const Prims& in) {
      return detail::scatter(1, in[0], ints({3, 0, 3, 1, 1, 2}, Shape{2, 3}, in[0]), in[1], update);
    });
    // Only one side tracked.
    gradcheck(device, name + " into a constant", {{Shape{2, 3}}}, [update](const Prims& in) {
      Primitive x = detail::full(Shape{3, 3}, 0.5, in[0]->dtype(), in[0]->device(), Kind::Float);
      return detail::scatter(0, x, ints({0, 0, 2, 0, 1, 2}, Shape{2, 3}, in[0]), in[0], update);
    });
  }
}

KILN_CONFORMANCE_ROW(grad_select, ({"grad:select", "grad:select_assign"})) {
  for (Layout layout : kLayouts) {
    gradcheck(device, "select 0", {{Shape{4, 3}, layout}}, [](const Prims& in) {
      return detail::select(in[0], 0, ints({2, 0, 2}, Shape{3}, in[0]));
    });
    gradcheck(device, "select 1", {{Shape{4, 3}, layout}}, [](const Prims& in) {
      return detail::select(in[0], 1, ints({1, 1, 0, 2, 1}, Shape{5}, in[0]));
    });
  }
  gradcheck(device, "select none", {{Shape{4, 3}}},
            [](const Prims& in) { return detail::select(in[0], 0, ints({}, Shape{0}, in[0])); });
  for (IndexingUpdate update : {kAssign, kAdd}) {
    const std::string name = "select_assign " + update_name(update);
    for (Layout layout : kLayouts) {
      gradcheck(
          device, name + " 0", {{Shape{4, 3}, layout}, {Shape{3, 3}}}, [update](const Prims& in) {
            return detail::select_assign(in[0], 0, ints({1, 3, 1}, Shape{3}, in[0]), in[1], update);
          });
    }
    gradcheck(
        device, name + " 1", {{Shape{2, 4}}, {Shape{2, 3}, Layout::Transposed}},
        [update](const Prims& in) {
          return detail::select_assign(in[0], 1, ints({3, 0, 3}, Shape{3}, in[0]), in[1], update);
        });
  }
}

KILN_CONFORMANCE_ROW(grad_nd, ({"grad:gather_nd", "grad:scatter_nd"})) {
  for (Layout layout : kLayouts) {
    // Tuples of 2 into [3, 4] (one repeated), and of 1 picking rows.
    gradcheck(device, "gather_nd 2", {{Shape{3, 4}, layout}}, [](const Prims& in) {
      return detail::gather_nd(in[0], ints({0, 1, 2, 3, 0, 1}, Shape{3, 2}, in[0]), 1);
    });
    gradcheck(device, "gather_nd 1", {{Shape{3, 4}, layout}}, [](const Prims& in) {
      return detail::gather_nd(in[0], ints({2, 0, 2}, Shape{3, 1}, in[0]), 2);
    });
  }
  gradcheck(device, "gather_nd 3-d", {{Shape{2, 3, 2}, Layout::Strided}}, [](const Prims& in) {
    return detail::gather_nd(in[0], ints({1, 2, 0, 0, 1, 2, 1, 0}, Shape{2, 2, 2}, in[0]), 3);
  });
  for (IndexingUpdate update : {kAssign, kAdd}) {
    const std::string name = "scatter_nd " + update_name(update);
    for (Layout layout : kLayouts) {
      gradcheck(
          device, name + " rows", {{Shape{3, 4}, layout}, {Shape{3, 4}}},
          [update](const Prims& in) {
            return detail::scatter_nd(in[0], ints({1, 0, 1}, Shape{3, 1}, in[0]), in[1], update);
          });
    }
    gradcheck(device, name + " elements", {{Shape{3, 4}}, {Shape{4}}}, [update](const Prims& in) {
      return detail::scatter_nd(in[0], ints({0, 1, 2, 2, 0, 1, 1, 3}, Shape{4, 2}, in[0]), in[1],
                                update);
    });
    // Tuples of length 0: every write covers all of x.
    gradcheck(device, name + " whole", {{Shape{3, 4}}, {Shape{2, 3, 4}}},
              [update](const Prims& in) {
                return detail::scatter_nd(in[0], ints({}, Shape{2, 0}, in[0]), in[1], update);
              });
    gradcheck(device, name + " 3-d", {{Shape{2, 3, 2}}, {Shape{2, 2, 2}, Layout::Transposed}},
              [update](const Prims& in) {
                return detail::scatter_nd(
                    in[0], ints({1, 2, 1, 2, 0, 0, 1, 1}, Shape{2, 2, 2}, in[0]), in[1], update);
              });
  }
}

KILN_CONFORMANCE_ROW(grad_slice, ({"grad:slice", "grad:slice_assign"})) {
  for (Layout layout : kLayouts) {
    gradcheck(device, "slice", {{Shape{4, 5}, layout}}, [](const Prims& in) {
      return detail::slice(in[0], {Slice(1, 3), Slice(0, std::nullopt, 2)});
    });
    gradcheck(device, "slice reversed", {{Shape{4, 5}, layout}}, [](const Prims& in) {
      return detail::slice(in[0], {Slice(0, std::nullopt, -1), Slice(1, 5, -3)});
    });
  }
  gradcheck(device, "slice empty", {{Shape{4, 5}}},
            [](const Prims& in) { return detail::slice(in[0], {Slice(2, 2)}); });
  gradcheck(device, "slice 3-d", {{Shape{2, 3, 4}, Layout::Offset}}, [](const Prims& in) {
    return detail::slice(in[0], {Slice::all(), Slice(1, std::nullopt), Slice(-3, -1)});
  });
  for (Layout layout : kLayouts) {
    gradcheck(device, "slice_assign", {{Shape{4, 5}, layout}, {Shape{2, 3}, Layout::Transposed}},
              [](const Prims& in) {
                return detail::slice_assign(in[0], {Slice(1, 3), Slice(0, std::nullopt, 2)}, in[1]);
              });
  }
  gradcheck(device, "slice_assign reversed", {{Shape{4, 5}}, {Shape{4, 2}}}, [](const Prims& in) {
    return detail::slice_assign(in[0], {Slice(0, std::nullopt, -1), Slice(1, 5, -3)}, in[1]);
  });
  // Values broadcast over the region (through expand).
  gradcheck(device, "slice_assign broadcast", {{Shape{4, 5}}, {Shape{1, 2}}}, [](const Prims& in) {
    return detail::slice_assign(in[0], {Slice(0, 3), Slice(3, 5)}, in[1]);
  });
}

KILN_CONFORMANCE_ROW(grad_mask, ({"grad:mask_where", "grad:mask_fill", "grad:mask_select"})) {
  const std::vector<double> mask = {1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 0, 1};
  for (Layout layout : kLayouts) {
    gradcheck(device, "mask_where", {{Shape{3, 4}, layout}, {Shape{3, 4}, Layout::Strided}},
              [&](const Prims& in) {
                return detail::mask_where(in[0], bools(mask, Shape{3, 4}, in[0]), in[1]);
              });
    gradcheck(device, "mask_fill", {{Shape{3, 4}, layout}}, [&](const Prims& in) {
      return detail::mask_fill(in[0], bools(mask, Shape{3, 4}, in[0]), 2.5);
    });
    gradcheck(device, "mask_select", {{Shape{3, 4}, layout}}, [&](const Prims& in) {
      return detail::mask_select(in[0], bools(mask, Shape{3, 4}, in[0]));
    });
  }
  // Broadcasting: x, mask and values each stretched along some dim.
  gradcheck(device, "mask_where broadcast", {{Shape{3, 1}}, {Shape{1, 4}}}, [&](const Prims& in) {
    return detail::mask_where(in[0], bools(mask, Shape{3, 4}, in[0]), in[1]);
  });
  gradcheck(device, "mask_where broadcast mask", {{Shape{3, 4}}, {Shape{3, 4}}},
            [](const Prims& in) {
              return detail::mask_where(in[0], bools({0, 1, 1, 0}, Shape{1, 4}, in[0]), in[1]);
            });
  gradcheck(device, "mask_fill broadcast", {{Shape{1, 4}}}, [&](const Prims& in) {
    return detail::mask_fill(in[0], bools(mask, Shape{3, 4}, in[0]), -1.0);
  });
  gradcheck(device, "mask_select broadcast x", {{Shape{3, 1}}}, [&](const Prims& in) {
    return detail::mask_select(in[0], bools(mask, Shape{3, 4}, in[0]));
  });
  gradcheck(device, "mask_select broadcast mask", {{Shape{3, 4}}}, [](const Prims& in) {
    return detail::mask_select(in[0], bools({1, 0, 1}, Shape{3, 1}, in[0]));
  });
  gradcheck(device, "mask_select nothing", {{Shape{2, 3}}}, [](const Prims& in) {
    return detail::mask_select(in[0], bools({0, 0, 0, 0, 0, 0}, Shape{2, 3}, in[0]));
  });
}

}  // namespace kiln::conformance
