// The library's log, as the backends see it (stderr, or the file in
// MIOPEN_BN_LOG_FILE): a warning (shown at MIOPEN_LOG_LEVEL 4 and above) about
// how the library adapted to its environment, outside any call's status, and
// information (level 5 and above) such as the algorithm a call takes.
// Defined by the front (logging.cpp), which owns the log's settings.
#pragma once

#include <string>

namespace mbn {

void log_warning(const char* where, const std::string& message);
void log_info(const char* where, const std::string& message);
bool info_logging_enabled();  // whether log_info writes: build its message only then

}  // namespace mbn
