// The neutral device headers under their former name, for the two files that
// still include it (param_io.h, bn_dense_inference.hip); new code includes
// norm_math.h and block_reduce.h.
#pragma once

#include "gpu/block_reduce.h"
#include "gpu/bn_layout.hpp"
#include "gpu/norm_math.h"
