// type_dispatch.hpp under its former name, for bn_dense_inference.hip,
// which still includes it; new code includes type_dispatch.hpp.
#pragma once

#include "gpu/type_dispatch.hpp"
