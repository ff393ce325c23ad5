// The one exception type of the library.  Anything below the C ABI reports a
// failure by throwing mbn::Error; the front's exception-to-status wrapper turns
// it into the call's miopenStatus_t and the thread's last-error message.
#pragma once

#include <miopen_bn.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace mbn {

class Error : public std::runtime_error {
public:
    Error(miopenStatus_t status, const std::string& message)
        : std::runtime_error(message), status_(status) {}
    miopenStatus_t status() const noexcept { return status_; }

private:
    miopenStatus_t status_;
};

// Streams every argument into one string: concat("x has rank ", 7).
template <typename... Parts>
std::string concat(Parts&&... parts) {
    std::ostringstream out;
    (out << ... << std::forward<Parts>(parts));
    return out.str();
}

template <typename... Parts>
[[noreturn]] void fail(miopenStatus_t status, Parts&&... parts) {
    throw Error(status, concat(std::forward<Parts>(parts)...));
}

template <typename... Parts>
void require(bool condition, miopenStatus_t status, Parts&&... parts) {
    if (!condition) fail(status, std::forward<Parts>(parts)...);
}

}  // namespace mbn
