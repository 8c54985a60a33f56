// kiln: one include for the whole public API.
#pragma once

#include "kiln/activation.h"
#include "kiln/autodiff.h"
#include "kiln/data.h"
#include "kiln/device.h"
#include "kiln/distribution.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/module_ops.h"
#include "kiln/options.h"
#include "kiln/scalar.h"
#include "kiln/shape.h"
#include "kiln/tensor.h"
#include "kiln/version.h"
