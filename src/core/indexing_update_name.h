// The lower-case name of an IndexingUpdate ("assign", "add", ...), for kernel keys and messages.
#pragma once

#include "kiln/options.h"

namespace kiln {

constexpr const char* indexing_update_name(IndexingUpdate update) {
  switch (update) {
    case IndexingUpdate::Assign:
      return "assign";
    case IndexingUpdate::Add:
      return "add";
    case IndexingUpdate::Mul:
      return "mul";
    case IndexingUpdate::Min:
      return "min";
    case IndexingUpdate::Max:
      return "max";
  }
  return "?";
}

}  // namespace kiln
