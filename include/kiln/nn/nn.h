// kiln::nn: modules, layers and losses in one include.
#pragma once

#include "kiln/nn/activation.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/bert.h"
#include "kiln/nn/conv.h"
#include "kiln/nn/dropout.h"
#include "kiln/nn/embedding.h"
#include "kiln/nn/init.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/loss.h"
#include "kiln/nn/module.h"
#include "kiln/nn/norm.h"
#include "kiln/nn/pool.h"
#include "kiln/nn/rnn.h"
#include "kiln/nn/sequential.h"
#include "kiln/nn/stateless.h"
#include "kiln/nn/transformer.h"
