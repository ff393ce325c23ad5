// MIOpen's logging environment, read once per process:
//   MIOPEN_ENABLE_LOGGING=1      each API call with its arguments
//   MIOPEN_ENABLE_LOGGING_CMD=1  each BN call as the driver command that reproduces it
//   MIOPEN_LOG_LEVEL=1..7        1 Quiet, 2 Fatal, 3 Error, 4 Warning (default), 5 Info, 6 Info2, 7 Trace
//   HIPDNN_LOG_LEVEL=off|fatal|error|warn|info   the same levels, as hipDNN's samples set them
//   MIOPEN_BN_LOG_FILE=path      append to a file instead of stderr (extension)
#pragma once

#include "common/log_sink.hpp"

#include <miopen_bn.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace mbn {

enum class LogLevel : int { quiet = 1, fatal = 2, error = 3, warning = 4, info = 5, info2 = 6, trace = 7 };

bool log_level_enabled(LogLevel level);
bool api_logging_enabled();
bool command_logging_enabled();

void log_error(const char* function, const std::string& message);
void log_command(const char* function, const std::string& command);

// Argument formatting for the API-call log: descriptors show their type,
// lengths and strides, pointers their address (or NULL), enums their value.
void format_descriptor(std::ostream& out, const miopenTensorDescriptor* desc);
void format_pointer(std::ostream& out, const void* pointer);
template <typename T>
void format_arg(std::ostream& out, const T& value) {
    if constexpr (std::is_convertible_v<T, const miopenTensorDescriptor*>)
        format_descriptor(out, value);
    else if constexpr (std::is_pointer_v<T>)
        format_pointer(out, value);
    else if constexpr (std::is_enum_v<T>)
        out << static_cast<long long>(value);
    else
        out << value;
}

void emit_api_call(const char* function, const std::string& arguments);

// Logs `function(name = value, ...)`; `names` is the stringified argument list.
template <typename... Args>
void log_api_call(const char* function, const char* names, const Args&... args) {
    if (!api_logging_enabled()) return;
    std::ostringstream out;
    std::string remaining(names);
    auto next_name = [&remaining]() {
        const auto comma = remaining.find(',');
        std::string name = remaining.substr(0, comma);
        remaining = comma == std::string::npos ? "" : remaining.substr(comma + 1);
        const auto first = name.find_first_not_of(' ');
        return first == std::string::npos ? name : name.substr(first);
    };
    bool first = true;
    auto one = [&](const auto& value) {
        out << (first ? "" : ", ") << next_name() << " = ";
        format_arg(out, value);
        first = false;
    };
    (one(args), ...);
    emit_api_call(function, out.str());
}

}  // namespace mbn

#define MBN_LOG_CALL(function, ...) ::mbn::log_api_call(function, #__VA_ARGS__, __VA_ARGS__)
