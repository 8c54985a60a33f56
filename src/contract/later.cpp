// The base bodies of LATER ops, declared for an issue that has not landed: they throw
// UnsupportedOperation naming op and backend. (REQUIRED ops are pure virtual.)
#include "contract/backend.h"
#include "kiln/detail/format.h"

namespace kiln {

#define KILN_OP_DEFINE_REQUIRED(op_name, result, params)
#define KILN_OP_DEFINE_LATER(op_name, result, params)                                   \
  result Backend::op_name params {                                                      \
    detail::fail<UnsupportedOperation>(#op_name, "not available yet on ", this->name(), \
                                       " (its issue has not landed)");                  \
  }
#define KILN_OP_DEFINE_DEFAULT(op_name, result, params)
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  KILN_OP_DEFINE_##availability(name, result, params)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include "kiln/detail/ops.def"
#pragma GCC diagnostic pop
#undef KILN_OP

void Backend::assign(const Primitive&, Primitive) {
  detail::fail<UnsupportedOperation>("assign", "writing in place is not available on ", name());
}

}  // namespace kiln
