#include "logging.hpp"

#include "common/environment.hpp"
#include "tensor_descriptor.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mbn {
namespace {

struct LogSettings {
    int level = static_cast<int>(LogLevel::warning);
    bool api_calls = false;
    bool commands = false;
    const char* path = nullptr;  // MIOPEN_BN_LOG_FILE, opened by the first line logged
};

int level_from_hipdnn(const char* value) {
    struct Named { const char* name; LogLevel level; };
    static const Named names[] = {{"off", LogLevel::quiet},   {"fatal", LogLevel::fatal},
                                  {"error", LogLevel::error}, {"warn", LogLevel::warning},
                                  {"info", LogLevel::info}};
    for (const auto& n : names)
        if (std::strcmp(value, n.name) == 0) return static_cast<int>(n.level);
    return static_cast<int>(LogLevel::warning);
}

LogSettings read_settings() {
    LogSettings s;
    if (const char* level = std::getenv("MIOPEN_LOG_LEVEL"); level && *level) {
        const int parsed = std::atoi(level);
        if (parsed >= 1 && parsed <= 7) s.level = parsed;
    } else if (const char* hipdnn = std::getenv("HIPDNN_LOG_LEVEL"); hipdnn && *hipdnn) {
        s.level = level_from_hipdnn(hipdnn);
    }
    s.api_calls = switch_from_environment("MIOPEN_ENABLE_LOGGING", false);
    s.commands = switch_from_environment("MIOPEN_ENABLE_LOGGING_CMD", false);
    if (const char* path = std::getenv("MIOPEN_BN_LOG_FILE"); path && *path) s.path = path;
    return s;
}

const LogSettings& settings() {
    static const LogSettings s = read_settings();
    return s;
}

// MIOPEN_BN_LOG_FILE appended to, or stderr when it is unset or cannot be
// used.  Opening never blocks (a FIFO without a reader would block open()
// for ever; one with a reader would block writes): only regular files and
// character devices (/dev/null, a terminal) are taken, and what is refused
// is said once on stderr.
std::FILE* open_sink(const char* path) {
    if (path == nullptr) return stderr;
    const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
    const char* problem = nullptr;
    struct stat info;
    if (fd < 0)
        problem = std::strerror(errno);
    else if (fstat(fd, &info) != 0 || !(S_ISREG(info.st_mode) || S_ISCHR(info.st_mode)))
        problem = "not a regular file or a character device";
    std::FILE* file = nullptr;
    if (problem == nullptr && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0) file = fdopen(fd, "a");
    if (file != nullptr) return file;
    if (fd >= 0) close(fd);
    std::fprintf(stderr,
                 "MIOpen(miopen-bn): Warning [logging] MIOPEN_BN_LOG_FILE=%s cannot be used (%s): logging to stderr\n",
                 path, problem ? problem : "it could not be opened");
    return stderr;
}

std::mutex sink_mutex;

void write_line(const char* kind, const char* function, const std::string& text) {
    std::lock_guard<std::mutex> lock(sink_mutex);
    static std::FILE* const sink = open_sink(settings().path);  // on the first line logged, not before
    std::fprintf(sink, "MIOpen(miopen-bn): %s [%s] %s\n", kind, function, text.c_str());
    std::fflush(sink);
}

}  // namespace

bool log_level_enabled(LogLevel level) { return settings().level >= static_cast<int>(level); }
bool info_logging_enabled() { return log_level_enabled(LogLevel::info); }
bool api_logging_enabled() { return settings().api_calls; }
bool command_logging_enabled() { return settings().commands; }

void log_error(const char* function, const std::string& message) {
    if (log_level_enabled(LogLevel::error)) write_line("Error", function, message);
}

void log_warning(const char* function, const std::string& message) {
    if (log_level_enabled(LogLevel::warning)) write_line("Warning", function, message);
}

void log_info(const char* function, const std::string& message) {
    if (log_level_enabled(LogLevel::info)) write_line("Info", function, message);
}

void log_command(const char* function, const std::string& command) {
    if (command_logging_enabled()) write_line("Command", function, command);
}

void emit_api_call(const char* function, const std::string& arguments) {
    write_line("Info", function, "{" + arguments + "}");
}

void format_descriptor(std::ostream& out, const miopenTensorDescriptor* desc) {
    if (desc == nullptr) {
        out << "NULL";
        return;
    }
    // Arguments are logged before they are checked: a destroyed descriptor
    // must not be read.
    const auto copy = try_snapshot_descriptor(desc);
    if (!copy) {
        out << static_cast<const void*>(desc) << " (not a live descriptor)";
        return;
    }
    // An unset descriptor has no contents to tell it apart: show its address.
    if (!copy->is_set()) out << static_cast<const void*>(desc) << ' ';
    out << *copy;
}

void format_pointer(std::ostream& out, const void* pointer) {
    if (pointer == nullptr)
        out << "NULL";
    else
        out << pointer;
}

}  // namespace mbn
