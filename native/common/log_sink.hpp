// The library's log, as the backends see it: a warning (stderr, or the file in
// MIOPEN_BN_LOG_FILE, shown at MIOPEN_LOG_LEVEL 4 and above) about how the
// library adapted to its environment, outside any call's status.  Defined by
// the front (logging.cpp), which owns the log's settings.
#pragma once

#include <string>

namespace mbn {

void log_warning(const char* where, const std::string& message);

}  // namespace mbn
