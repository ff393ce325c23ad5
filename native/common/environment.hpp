// The library's tuning variables, read by one rule: a variable that is unset,
// empty or malformed keeps the default, so a typo never changes behaviour
// half-way.  (Logging and MIOPEN_BN_BACKEND have their own documented values.)
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

// A kernel path's variable: "0" never, "force" wherever the path can serve
// the call (tests and comparisons), anything else its own size rule; unset
// or empty keeps the rule.
enum class PathUse { never, automatic, forced };
inline PathUse path_use_from_environment(const char* name) {
    const char* text = std::getenv(name);
    if (text != nullptr && std::strcmp(text, "force") == 0) return PathUse::forced;
    return switch_from_environment(name, true) ? PathUse::automatic : PathUse::never;
}

}  // namespace mbn
