// The library's tuning variables, read by one rule: a variable that is unset,
// empty or malformed keeps the default, so a typo never changes behaviour
// half-way.  (Logging, MIOPEN_BN_BACKEND and MIOPEN_BN_GPU_ALGORITHM have their
// own documented values.)
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace mbn {

// The positive whole number in `name` ("64", not "64k" or "-1"), else `fallback`.
inline std::int64_t positive_from_environment(const char* name, std::int64_t fallback) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') return fallback;
    char* end = nullptr;
    const long long value = std::strtoll(text, &end, 10);
    return *end == '\0' && value > 0 ? static_cast<std::int64_t>(value) : fallback;
}

// A switch: "0" turns it off, any other value on, unset or empty keeps `fallback`.
inline bool switch_from_environment(const char* name, bool fallback) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') return fallback;
    return std::strcmp(text, "0") != 0;
}

}  // namespace mbn
