// KILN_NAMED's name is a string literal: a name computed at run time could differ between the
// program that saves and the one that loads.
#include <kiln/kiln.h>
#include <string>
using namespace kiln;
const std::string computed = "LayerNorm";
struct Block {
  nn::Linear dense;
  nn::LayerNorm layer_norm;
  KILN_MODULE(dense, KILN_NAMED(layer_norm, computed))  // error: member_name
};
