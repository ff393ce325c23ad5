// The CPU group-norm operations, one per Backend entry point.  Each takes a
// problem the front has validated and runs it on the process's thread pool.
#pragma once

#include "common/group_norm_problem.hpp"

namespace mbn::cpu {

void group_norm_forward(const GnForward& p);
void group_norm_backward(const GnBackward& p);

}  // namespace mbn::cpu
