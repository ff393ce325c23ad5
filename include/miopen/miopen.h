/* MIOpen's public header name: code that includes <miopen/miopen.h> compiles
 * unchanged against miopen-bn, which provides the batch-normalization subset. */
#ifndef MIOPEN_BN_MIOPEN_H_FORWARD_
#define MIOPEN_BN_MIOPEN_H_FORWARD_
#include "../miopen_bn.h"
#endif
