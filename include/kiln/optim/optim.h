// kiln::optim in one include: optimizers (SGD, Adam, AdamW, RMSprop), gradient clipping and
// learning-rate schedules.
#pragma once

#include "kiln/optim/adam.h"
#include "kiln/optim/clip.h"
#include "kiln/optim/grad_scaler.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/rmsprop.h"
#include "kiln/optim/scheduler.h"
#include "kiln/optim/sgd.h"
