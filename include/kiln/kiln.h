// kiln: one include for the whole public API: tensors and devices, autodiff, modules (nn),
// optimizers (optim), weights on disk (record), data loading (data) and the training loop
// (train). Programs that want less include the headers they use.
#pragma once

#include "kiln/activation.h"
#include "kiln/autodiff.h"
#include "kiln/data.h"
#include "kiln/device.h"
#include "kiln/distribution.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/half.h"
#include "kiln/module_ops.h"
#include "kiln/options.h"
#include "kiln/primitive.h"
#include "kiln/scalar.h"
#include "kiln/shape.h"
#include "kiln/tensor.h"
#include "kiln/version.h"

#include "kiln/nn/nn.h"
#include "kiln/nn/record.h"
#include "kiln/optim/optim.h"
#include "kiln/record/safetensors.h"

#include "kiln/data/classification.h"
#include "kiln/data/csv.h"
#include "kiln/data/dataset.h"
#include "kiln/data/digits.h"
#include "kiln/data/loader.h"
#include "kiln/data/permutation.h"
#include "kiln/data/views.h"

#include "kiln/train/history.h"
#include "kiln/train/learner.h"
#include "kiln/train/progress.h"
