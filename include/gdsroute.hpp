/*
 * gdsroute.hpp: the C++ API of gdsroute, header-only, over the C ABI of gdsroute.h.
 *
 * Shaped like KvikIO's C++ API (kvikio::FileHandle, MmapHandle, defaults, buffer_register,
 * DriverProperties) so that porting is mechanical; docs/cpp.md maps it call by call and says
 * what differs. C++17 and later. Everything here is inline: include it from any number of
 * translation units.
 *
 * Two forms of every call that can fail, one implementation:
 * - the non-throwing form, the base: `try_read(...)`, `File::try_open(...)`, ... return a
 *   gdsroute::Result<T> holding the value or an ErrorInfo (status, errno, message);
 * - the throwing form, a thin layer on it: `read(...)`, `File(path, ...)`, ... return the value
 *   or throw gdsroute::Error (which carries the same status, errno and message). It exists only
 *   when exceptions are enabled (__cpp_exceptions); under -fno-exceptions those calls are not
 *   declared, and Result<T>::value() of a failed result prints the error on stderr and calls
 *   std::abort() (check ok() first). Translation units of both modes may share a program: each
 *   keeps its own Result and Monitor (see GDSROUTE_HPP_MODE below).
 * The error's message is gdsroute_last_error_message(), read right after the failing call on the
 * calling thread.
 *
 * Handles (File, MmapHandle, Pool, Future, registrations, the settings guard) are move-only
 * RAII types; a moved-from handle is closed (or empty), and closing twice is fine.
 */
#ifndef GDSROUTE_HPP
#define GDSROUTE_HPP

#include "gdsroute.h"

#if !defined(__cplusplus) || __cplusplus < 201703L
#error "gdsroute.hpp needs C++17 or later (gdsroute.h alone works from C++11)"
#endif

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
#define GDSROUTE_HPP_EXCEPTIONS 1
#else
#define GDSROUTE_HPP_EXCEPTIONS 0
#endif

/* What behaves differently with and without exceptions (detail::fail, Result, Monitor) lives in an
 * inline namespace named after the mode: translation units of both modes can then be linked into
 * one program without the linker keeping one mode's copy for both. Names are unchanged in the
 * source (gdsroute::Result<T>). */
#if GDSROUTE_HPP_EXCEPTIONS
#define GDSROUTE_HPP_MODE exceptions_on
#else
#define GDSROUTE_HPP_MODE exceptions_off
#endif

namespace gdsroute {

// ---------------------------------------------------------------------------------------------
// Enumerations (the C enums' values)
// ---------------------------------------------------------------------------------------------

/** A gdsroute_status (GDSROUTE_STATUS_OK, ...). */
using Status = gdsroute_status;

/** KvikIO's CompatMode: whether device reads go through cuFile or the POSIX backend. */
enum class CompatMode : std::uint32_t {
    OFF = GDSROUTE_COMPAT_MODE_OFF,
    ON = GDSROUTE_COMPAT_MODE_ON,
    AUTO = GDSROUTE_COMPAT_MODE_AUTO,
};

/** When stream-ordered calls queue on their stream without blocking the caller (the
 *  stream_ordered setting, GDSROUTE_STREAM_ORDERED; AUTO: flag wait on non-blocking streams,
 *  relayed on the others while GDSROUTE_STREAM_RELAY is on). */
enum class StreamOrderedMode : std::uint32_t {
    OFF = GDSROUTE_STREAM_ORDERED_OFF,
    ON = GDSROUTE_STREAM_ORDERED_ON,
    AUTO = GDSROUTE_STREAM_ORDERED_AUTO,
};

/** Which descriptor is registered with cuFile (the cufile_fd setting). */
enum class CufileFd : std::uint32_t {
    AUTO = GDSROUTE_CUFILE_FD_AUTO,
    DIRECT = GDSROUTE_CUFILE_FD_DIRECT,
    BUFFERED = GDSROUTE_CUFILE_FD_BUFFERED,
};

/** Why cuFile is not used (gdsroute_fallback_reason). */
enum class FallbackReason : std::uint32_t {
    NONE = GDSROUTE_FALLBACK_REASON_NONE,
    COMPAT_ON = GDSROUTE_FALLBACK_REASON_COMPAT_ON,
    CUDA_UNAVAILABLE = GDSROUTE_FALLBACK_REASON_CUDA_UNAVAILABLE,
    LIBRARY_UNAVAILABLE = GDSROUTE_FALLBACK_REASON_LIBRARY_UNAVAILABLE,
    NO_UDEV = GDSROUTE_FALLBACK_REASON_NO_UDEV,
    WSL = GDSROUTE_FALLBACK_REASON_WSL,
    DRIVER_OPEN_FAILED = GDSROUTE_FALLBACK_REASON_DRIVER_OPEN_FAILED,
    DIRECT_OPEN_FAILED = GDSROUTE_FALLBACK_REASON_DIRECT_OPEN_FAILED,
    REGISTER_FAILED = GDSROUTE_FALLBACK_REASON_REGISTER_FAILED,
};

/** The memory a pointer points into, as gdsroute routes it (gdsroute_memory_kind). */
enum class MemoryKind : std::uint32_t {
    HOST = GDSROUTE_OBSERVED_MEMORY_HOST,
    DEVICE = GDSROUTE_OBSERVED_MEMORY_DEVICE,
    MANAGED = GDSROUTE_OBSERVED_MEMORY_MANAGED,
};

/** Output formats of Stats::render. */
enum class StatsFormat : std::uint32_t {
    TEXT = GDSROUTE_STATS_FORMAT_TEXT,
    JSON = GDSROUTE_STATS_FORMAT_JSON,
};

/** The static name of a status code (gdsroute_status_str). */
inline const char *status_str(Status status) noexcept { return gdsroute_status_str(status); }

// ---------------------------------------------------------------------------------------------
// Errors and results
// ---------------------------------------------------------------------------------------------

/** What a failed call reported: its status, the errno behind it (0 if none) and the message. */
struct ErrorInfo {
    Status status = GDSROUTE_STATUS_OK;
    std::int32_t os_errno = 0;
    std::string message;

    /** The error of the call that just returned `status` on this thread. */
    static ErrorInfo last(Status status) {
        ErrorInfo info;
        info.status = status;
        info.os_errno = gdsroute_last_error_errno();
        std::size_t len = gdsroute_last_error_message(nullptr, 0);
        info.message.assign(len, '\0');
        if (len > 0) {
            (void)gdsroute_last_error_message(&info.message[0], len + 1);
        }
        if (info.message.empty()) {
            info.message = gdsroute_status_str(status);
        }
        return info;
    }
};

/** Prints "STATUS NAME (code, errno N): message", e.g. for `std::cerr << result.error()`. */
inline std::ostream &operator<<(std::ostream &os, const ErrorInfo &error) {
    return os << gdsroute_status_str(error.status) << " (" << static_cast<unsigned>(error.status) << ", errno "
              << error.os_errno << "): " << error.message;
}

#if GDSROUTE_HPP_EXCEPTIONS
/**
 * The exception of the throwing form: a std::runtime_error whose what() is the library's message
 * (gdsroute_last_error_message, read right after the failing call), with the status and errno.
 */
class Error : public std::runtime_error {
  public:
    explicit Error(ErrorInfo info) : std::runtime_error(info.message), info_(std::move(info)) {}
    /** The gdsroute_status of the failed call. */
    Status status() const noexcept { return info_.status; }
    /** The errno behind it (gdsroute_last_error_errno), 0 if it was not a system-call failure. */
    std::int32_t os_errno() const noexcept { return info_.os_errno; }
    /** The status's static name. */
    const char *status_name() const noexcept { return gdsroute_status_str(info_.status); }
    const ErrorInfo &info() const noexcept { return info_; }

  private:
    ErrorInfo info_;
};
#endif

namespace detail {
inline namespace GDSROUTE_HPP_MODE {
[[noreturn]] inline void fail(const ErrorInfo &error) {
#if GDSROUTE_HPP_EXCEPTIONS
    throw Error(error);
#else
    std::fprintf(stderr, "gdsroute: value() of a failed gdsroute::Result: %s (%u, errno %d): %s\n",
                 gdsroute_status_str(error.status), static_cast<unsigned>(error.status),
                 static_cast<int>(error.os_errno), error.message.c_str());
    std::abort();
#endif
}
} // namespace GDSROUTE_HPP_MODE
} // namespace detail

inline namespace GDSROUTE_HPP_MODE {

/**
 * The non-throwing form's result: a value of type T, or the ErrorInfo of the failed call.
 * value() of a failed result throws gdsroute::Error (with exceptions), or prints the error and
 * aborts (without); check ok() first.
 */
template <class T> class [[nodiscard]] Result {
  public:
    Result(T value) : value_(std::move(value)) {}
    Result(ErrorInfo error) : error_(std::move(error)) {}

    bool ok() const noexcept { return value_.has_value(); }
    /** std::optional's and std::expected's name for ok(). */
    bool has_value() const noexcept { return ok(); }
    explicit operator bool() const noexcept { return ok(); }

    T &value() & {
        if (!ok()) detail::fail(error_);
        return *value_;
    }
    const T &value() const & {
        if (!ok()) detail::fail(error_);
        return *value_;
    }
    T &&value() && {
        if (!ok()) detail::fail(error_);
        return std::move(*value_);
    }
    template <class U> T value_or(U &&fallback) const & {
        return ok() ? *value_ : static_cast<T>(std::forward<U>(fallback));
    }
    T *operator->() { return &value(); }
    T &operator*() & { return value(); }

    /** The error (status OK and an empty message when ok()). */
    const ErrorInfo &error() const noexcept { return error_; }
    Status status() const noexcept { return error_.status; }
    std::int32_t os_errno() const noexcept { return error_.os_errno; }
    const std::string &message() const noexcept { return error_.message; }

  private:
    std::optional<T> value_;
    ErrorInfo error_;
};

/** Result of a call with no value. */
template <> class [[nodiscard]] Result<void> {
  public:
    Result() = default;
    Result(ErrorInfo error) : error_(std::move(error)) {}

    bool ok() const noexcept { return error_.status == GDSROUTE_STATUS_OK; }
    explicit operator bool() const noexcept { return ok(); }
    /** Throws (or aborts, without exceptions) if the call failed. */
    void value() const {
        if (!ok()) detail::fail(error_);
    }
    const ErrorInfo &error() const noexcept { return error_; }
    Status status() const noexcept { return error_.status; }
    std::int32_t os_errno() const noexcept { return error_.os_errno; }
    const std::string &message() const noexcept { return error_.message; }

  private:
    ErrorInfo error_;
};

} // namespace GDSROUTE_HPP_MODE

namespace detail {
/** OK, or the error of the call that returned `st`. */
inline Result<void> check(Status st) {
    if (st == GDSROUTE_STATUS_OK) return Result<void>();
    return Result<void>(ErrorInfo::last(st));
}
/** `value` is read after `st` was computed: pass the variable the call wrote (by reference), never
 * an expression of it such as a cast (function arguments are evaluated in no fixed order: GCC
 * would read the variable before the call wrote it). To convert, call first into a Status. */
template <class T> inline Result<T> make(Status st, const T &value) {
    if (st == GDSROUTE_STATUS_OK) return Result<T>(value);
    return Result<T>(ErrorInfo::last(st));
}
/** An error made on the C++ side (no C call failed); the last-error state is not touched. */
inline ErrorInfo own_error(Status st, std::string message) {
    ErrorInfo info;
    info.status = st;
    info.message = std::move(message);
    return info;
}
/** CLOSED_HANDLE for a handle that holds nothing (default-constructed or moved from). */
inline ErrorInfo closed_error(const char *type) {
    return own_error(GDSROUTE_STATUS_CLOSED_HANDLE,
                     std::string(type) + ": the handle is closed (default-constructed or moved from)");
}
/** Calls `fill(buf, buf_len, &length)` twice (size, then text), snprintf semantics. */
template <class Fill> inline Result<std::string> text(Fill fill) {
    std::size_t len = 0;
    Status st = fill(static_cast<char *>(nullptr), std::size_t{0}, &len);
    if (st != GDSROUTE_STATUS_OK) return Result<std::string>(ErrorInfo::last(st));
    std::string out(len, '\0');
    for (;;) {
        std::size_t got = 0;
        st = fill(&out[0], out.size() + 1, &got);
        if (st != GDSROUTE_STATUS_OK) return Result<std::string>(ErrorInfo::last(st));
        if (got <= out.size()) {
            out.resize(got);
            return Result<std::string>(std::move(out));
        }
        out.assign(got, '\0'); // it grew between the calls
    }
}
/** `p + off`; NULL stays NULL, so the library reports NULL_ARGUMENT (arithmetic on a null pointer
 * is undefined and would hand it a bogus address). */
inline char *offset(void *p, std::size_t off) noexcept {
    return p == nullptr ? nullptr : static_cast<char *>(p) + off;
}
inline const char *offset(const void *p, std::size_t off) noexcept {
    return p == nullptr ? nullptr : static_cast<const char *>(p) + off;
}
/** The error for a string with a NUL byte inside, which c_str() would silently cut short for the C
 * API; nullopt when there is none. `what` names the string ("path", "flags", ...). */
inline std::optional<ErrorInfo> nul_byte_error(Status st, const char *what, const std::string &value) {
    std::size_t at = value.find('\0');
    if (at == std::string::npos) return std::nullopt;
    return own_error(st, std::string("gdsroute: the ") + what + " has a NUL byte at offset " + std::to_string(at) +
                             " (after \"" + value.substr(0, at) + "\")");
}
inline std::optional<ErrorInfo> path_nul_error(const std::string &path) {
    return nul_byte_error(GDSROUTE_STATUS_INVALID_PATH, "path", path);
}
} // namespace detail

// ---------------------------------------------------------------------------------------------
// Version
// ---------------------------------------------------------------------------------------------

/** The loaded library's version string ("MAJOR.MINOR.PATCH"); GDSROUTE_VERSION_STRING is the
 * header's. */
inline const char *version() noexcept { return gdsroute_version_string(); }

// ---------------------------------------------------------------------------------------------
// Futures
// ---------------------------------------------------------------------------------------------

/**
 * An operation in flight (gdsroute_op), returned by pread, pwrite, read_async, write_async and
 * MmapHandle::pread: KvikIO's std::future<std::size_t> and StreamFuture in one move-only type.
 * get() gives the bytes read or written (may be called again: the same result); wait() blocks
 * until the operation ended; poll()/is_ready() never block.
 *
 * The destructor frees the operation, which first waits for it (gdsroute_op_free), so the buffer
 * is no longer written once a Future is gone; except a stream-ordered operation (read_async,
 * write_async), which is not waited for: it still happens in stream order, and its buffer must
 * stay valid until the stream has passed it. A moved-from or default-constructed Future is
 * empty (valid() false; its calls report NULL_ARGUMENT).
 */
class [[nodiscard]] Future {
  public:
    Future() noexcept = default;
    /** Takes ownership of an operation from the C API. */
    explicit Future(gdsroute_op *op) noexcept : op_(op) {}
    Future(Future &&other) noexcept : op_(std::exchange(other.op_, nullptr)) {}
    Future &operator=(Future &&other) noexcept {
        if (this != &other) {
            gdsroute_op_free(op_);
            op_ = std::exchange(other.op_, nullptr);
        }
        return *this;
    }
    Future(const Future &) = delete;
    Future &operator=(const Future &) = delete;
    ~Future() { gdsroute_op_free(op_); }

    bool valid() const noexcept { return op_ != nullptr; }

    /** Blocks until the operation ended; its bytes, or its error. */
    Result<std::size_t> try_get() const {
        std::size_t n = 0;
        return detail::make(gdsroute_op_wait(op_, &n), n);
    }
    /** Whether the operation ended, never blocking. */
    Result<bool> try_poll() const {
        bool done = false;
        return detail::make(gdsroute_op_poll(op_, &done), done);
    }
    /** Blocks until the operation ended, whatever its result (get() gives it). */
    void wait() const noexcept {
        std::size_t n = 0;
        (void)gdsroute_op_wait(op_, &n);
    }
    /** poll() that answers false for an empty Future instead of failing. */
    bool is_ready() const noexcept {
        bool done = false;
        return op_ != nullptr && gdsroute_op_poll(op_, &done) == GDSROUTE_STATUS_OK && done;
    }
#if GDSROUTE_HPP_EXCEPTIONS
    /** The bytes read or written; throws Error for the operation's error. */
    std::size_t get() const { return try_get().value(); }
    bool poll() const { return try_poll().value(); }
#endif

    gdsroute_op *native_handle() const noexcept { return op_; }
    /** Gives up ownership: the caller frees the operation (gdsroute_op_free). */
    gdsroute_op *release() noexcept { return std::exchange(op_, nullptr); }

  private:
    gdsroute_op *op_ = nullptr;
};

/** KvikIO's name for a stream-ordered operation's future. */
using StreamFuture = Future;

// ---------------------------------------------------------------------------------------------
// Statistics
// ---------------------------------------------------------------------------------------------

/**
 * A snapshot of the counters: a gdsroute_stats (every field readable directly, s.calls, ...)
 * with rendering. `os << stats` prints the text rendering: the summary line in words, then the
 * counters that are not 0.
 */
struct Stats : gdsroute_stats {
    Stats() noexcept : gdsroute_stats() { struct_size = sizeof(gdsroute_stats); }
    explicit Stats(const gdsroute_stats &raw) noexcept : gdsroute_stats(raw) {}

    /** The process-wide counters (gdsroute_stats_get). */
    static Result<Stats> try_process() {
        Stats s;
        return detail::make(gdsroute_stats_get(&s), s);
    }
    /** Zeroes the process-wide counters (gdsroute_stats_reset). */
    static Result<void> try_reset_process() { return detail::check(gdsroute_stats_reset()); }

    /** Text (summary line, non-zero counters) or JSON (every field). */
    Result<std::string> try_render(StatsFormat format = StatsFormat::TEXT) const {
        const gdsroute_stats *raw = this;
        return detail::text([&](char *buf, std::size_t len, std::size_t *out) {
            return gdsroute_stats_render(raw, static_cast<std::uint32_t>(format), buf, len, out);
        });
    }
    /** The first line of the text rendering: the summary in words. */
    Result<std::string> try_summary() const {
        Result<std::string> text = try_render(StatsFormat::TEXT);
        if (!text.ok()) return text;
        std::string line = text.value();
        std::size_t nl = line.find('\n');
        if (nl != std::string::npos) line.resize(nl);
        return Result<std::string>(std::move(line));
    }
    const gdsroute_stats &raw() const noexcept { return *this; }

#if GDSROUTE_HPP_EXCEPTIONS
    static Stats process() { return try_process().value(); }
    static void reset_process() { try_reset_process().value(); }
    std::string render(StatsFormat format = StatsFormat::TEXT) const { return try_render(format).value(); }
    std::string summary() const { return try_summary().value(); }
#endif
};

/** Prints the text rendering (summary first); sets failbit if it cannot be rendered. */
inline std::ostream &operator<<(std::ostream &os, const Stats &stats) {
    Result<std::string> text = stats.try_render(StatsFormat::TEXT);
    if (text.ok()) {
        os << text.value();
    } else {
        os.setstate(std::ios_base::failbit);
    }
    return os;
}

/** The process-wide counters (KvikIO has none of its own before 26.10). */
inline Result<Stats> try_stats() { return Stats::try_process(); }
inline Result<void> try_stats_reset() { return Stats::try_reset_process(); }

/** The process-wide counters of each device (gdsroute_stats_get_devices). */
inline Result<std::vector<gdsroute_device_stats>> try_device_stats() {
    using V = std::vector<gdsroute_device_stats>;
    for (;;) {
        std::size_t count = 0;
        gdsroute_device_stats probe{};
        probe.struct_size = sizeof probe;
        Status st = gdsroute_stats_get_devices(&probe, 0, &count);
        if (st != GDSROUTE_STATUS_OK) return Result<V>(ErrorInfo::last(st));
        V out(count);
        if (count == 0) return Result<V>(std::move(out));
        out[0].struct_size = sizeof(gdsroute_device_stats);
        std::size_t got = 0;
        st = gdsroute_stats_get_devices(out.data(), out.size(), &got);
        if (st != GDSROUTE_STATUS_OK) return Result<V>(ErrorInfo::last(st));
        if (got <= out.size()) {
            out.resize(got);
            return Result<V>(std::move(out));
        }
    }
}
/** Renders device counters (gdsroute_stats_render_devices). */
inline Result<std::string> try_render_device_stats(const std::vector<gdsroute_device_stats> &devices,
                                                   StatsFormat format = StatsFormat::TEXT) {
    return detail::text([&](char *buf, std::size_t len, std::size_t *out) {
        return gdsroute_stats_render_devices(devices.empty() ? nullptr : devices.data(), devices.size(),
                                             static_cast<std::uint32_t>(format), buf, len, out);
    });
}

#if GDSROUTE_HPP_EXCEPTIONS
inline Stats stats() { return try_stats().value(); }
inline void stats_reset() { try_stats_reset().value(); }
inline std::vector<gdsroute_device_stats> device_stats() { return try_device_stats().value(); }
inline std::string render_device_stats(const std::vector<gdsroute_device_stats> &devices,
                                       StatsFormat format = StatsFormat::TEXT) {
    return try_render_device_stats(devices, format).value();
}
#endif

// ---------------------------------------------------------------------------------------------
// Pools
// ---------------------------------------------------------------------------------------------

/**
 * A pool of worker threads for File::set_pool (gdsroute_pool_create). Move-only; the destructor
 * lets go of it (gdsroute_pool_free): its workers leave once no handle holds it, after what was
 * queued on it ran. Passing a Pool is KvikIO's `thread_pool` argument, given once per handle.
 */
class Pool {
  public:
    Pool() noexcept = default;
    /** Takes ownership of a pool from the C API. */
    static Pool adopt(gdsroute_pool *pool) noexcept {
        Pool p;
        p.pool_ = pool;
        return p;
    }
    Pool(Pool &&other) noexcept : pool_(std::exchange(other.pool_, nullptr)) {}
    Pool &operator=(Pool &&other) noexcept {
        if (this != &other) {
            gdsroute_pool_free(pool_);
            pool_ = std::exchange(other.pool_, nullptr);
        }
        return *this;
    }
    Pool(const Pool &) = delete;
    Pool &operator=(const Pool &) = delete;
    ~Pool() { gdsroute_pool_free(pool_); }

    /** `threads` workers (1 to GDSROUTE_MAX_THREADS), each on `cpus` only when not empty. */
    static Result<Pool> try_create(std::size_t threads, const std::vector<std::size_t> &cpus = {}) {
        gdsroute_pool *raw = nullptr;
        Status st = gdsroute_pool_create(threads, cpus.empty() ? nullptr : cpus.data(), cpus.size(), &raw);
        if (st != GDSROUTE_STATUS_OK) return Result<Pool>(ErrorInfo::last(st));
        return Result<Pool>(Pool::adopt(raw));
    }
#if GDSROUTE_HPP_EXCEPTIONS
    explicit Pool(std::size_t threads, const std::vector<std::size_t> &cpus = {})
        : Pool(try_create(threads, cpus).value()) {}
#endif

    bool valid() const noexcept { return pool_ != nullptr; }
    gdsroute_pool *native_handle() const noexcept { return pool_; }
    gdsroute_pool *release() noexcept { return std::exchange(pool_, nullptr); }

  private:
    gdsroute_pool *pool_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// cuFile verdicts
// ---------------------------------------------------------------------------------------------

/** Whether cuFile serves device reads, and if not why (FallbackReason and the text). */
struct CufileVerdict {
    FallbackReason reason = FallbackReason::NONE;
    std::string explanation;
    bool usable() const noexcept { return reason == FallbackReason::NONE; }
};

namespace detail {
template <class Call> inline Result<CufileVerdict> verdict(Call call) {
    std::uint32_t reason = 0;
    Result<std::string> text = detail::text([&](char *buf, std::size_t len, std::size_t *out) {
        return call(&reason, buf, len, out);
    });
    if (!text.ok()) return Result<CufileVerdict>(text.error());
    CufileVerdict v;
    v.reason = static_cast<FallbackReason>(reason);
    v.explanation = std::move(text.value());
    return Result<CufileVerdict>(std::move(v));
}
} // namespace detail

/** Whether cuFile can serve device reads in this process (gdsroute_cufile_usable): may open
 * cuFile's driver (0.4 to 0.5 s once per process) unless compat mode is ON. */
inline Result<CufileVerdict> try_cufile_usable() {
    return detail::verdict([](std::uint32_t *r, char *b, std::size_t l, std::size_t *o) {
        return gdsroute_cufile_usable(r, b, l, o);
    });
}

// ---------------------------------------------------------------------------------------------
// File
// ---------------------------------------------------------------------------------------------

/**
 * An open file (gdsroute_file): KvikIO's FileHandle. Move-only; the destructor closes and frees
 * it. A default-constructed or moved-from File is closed: its calls fail with CLOSED_HANDLE
 * (closed() is true); close() is idempotent. Move-assignment closes the target first.
 *
 * `buf` may be host (pageable or pinned), device or managed memory everywhere. Reads return the
 * bytes read, fewer than asked only at end of file; writes return the whole size or fail.
 */
class File {
  public:
    File() noexcept = default;
    /** Takes ownership of a handle from the C API. */
    explicit File(gdsroute_file *file) noexcept : file_(file) {}
    File(File &&other) noexcept : file_(std::exchange(other.file_, nullptr)) {}
    File &operator=(File &&other) noexcept {
        if (this != &other) {
            gdsroute_file_free(file_);
            file_ = std::exchange(other.file_, nullptr);
        }
        return *this;
    }
    File(const File &) = delete;
    File &operator=(const File &) = delete;
    ~File() { gdsroute_file_free(file_); }

    /**
     * Opens `path` with KvikIO's flags ("r", "r+", "w", "w+") or an exclusive creation ("x",
     * "x+": OPEN_FAILED with EEXIST where the file exists), `mode` for a created file, and the
     * handle's compat mode (nullopt: the process default, as KvikIO's defaults::compat_mode()).
     */
    static Result<File> try_open(const std::string &path, const std::string &flags = "r",
                                 unsigned mode = 0644, std::optional<CompatMode> compat_mode = std::nullopt) {
        if (auto bad = detail::path_nul_error(path)) return Result<File>(std::move(*bad));
        if (auto bad = detail::nul_byte_error(GDSROUTE_STATUS_INVALID_FLAGS, "flags", flags)) {
            return Result<File>(std::move(*bad));
        }
        gdsroute_file *raw = nullptr;
        Status st = compat_mode
                        ? gdsroute_file_open_with_compat_mode(path.c_str(), flags.c_str(), mode,
                                                              static_cast<std::uint32_t>(*compat_mode), &raw)
                        : gdsroute_file_open(path.c_str(), flags.c_str(), mode, &raw);
        if (st != GDSROUTE_STATUS_OK) return Result<File>(ErrorInfo::last(st));
        return Result<File>(File(raw));
    }
    /**
     * A handle on the file open as the caller's descriptor `fd` (gdsroute_file_open_fd): it holds
     * a duplicate, so the caller keeps `fd` and closes it when it likes; the access mode, status
     * flags and flock locks are `fd`'s. For file drivers.
     */
    static Result<File> try_open_fd(int fd, std::optional<CompatMode> compat_mode = std::nullopt) {
        gdsroute_file *raw = nullptr;
        Status st = compat_mode
                        ? gdsroute_file_open_fd_with_compat_mode(fd, static_cast<std::uint32_t>(*compat_mode), &raw)
                        : gdsroute_file_open_fd(fd, &raw);
        if (st != GDSROUTE_STATUS_OK) return Result<File>(ErrorInfo::last(st));
        return Result<File>(File(raw));
    }
#if GDSROUTE_HPP_EXCEPTIONS
    /** KvikIO's FileHandle(path, flags, mode, compat_mode); throws Error. */
    explicit File(const std::string &path, const std::string &flags = "r", unsigned mode = 0644,
                  std::optional<CompatMode> compat_mode = std::nullopt)
        : File(try_open(path, flags, mode, compat_mode).value()) {}
    /** try_open_fd; throws Error. */
    static File open_fd(int fd, std::optional<CompatMode> compat_mode = std::nullopt) {
        return try_open_fd(fd, compat_mode).value();
    }
#endif

    /** Closes the file (gdsroute_file_close); idempotent, never fails. Operations in flight
     * complete. Later calls fail with CLOSED_HANDLE; the destructor frees the handle. */
    void close() noexcept { (void)gdsroute_file_close(file_); }
    /** Whether the handle is closed (moved-from and default-constructed ones are). */
    bool closed() const noexcept {
        bool c = true;
        return file_ == nullptr || gdsroute_file_is_closed(file_, &c) != GDSROUTE_STATUS_OK || c;
    }

    // Queries ---------------------------------------------------------------------------------
    /** The file's current size (fstat); KvikIO's nbytes(). */
    Result<std::uint64_t> try_nbytes() const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        std::uint64_t n = 0;
        return detail::make(gdsroute_file_size(file_, &n), n);
    }
    /** The descriptor the handle reads and writes through; never close it. */
    Result<int> try_fd() const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        int fd = -1;
        return detail::make(gdsroute_file_fd(file_, &fd), fd);
    }
    /** fcntl(F_GETFL) of that descriptor. */
    Result<int> try_fd_open_flags() const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        int flags = 0;
        return detail::make(gdsroute_file_fd_open_flags(file_, &flags), flags);
    }
    /** The O_DIRECT descriptor where one is open already, else -1 (asking opens none). */
    Result<int> try_direct_fd() const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        int fd = -1;
        return detail::make(gdsroute_file_direct_fd(file_, &fd), fd);
    }
    /** The compat mode the handle was opened with. */
    Result<CompatMode> try_compat_mode() const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        std::uint32_t m = 0;
        Status st = gdsroute_file_compat_mode(file_, &m);
        return detail::make(st, static_cast<CompatMode>(m));
    }
    /** Whether cuFile serves this file's device reads and if not why; may open cuFile's driver. */
    Result<CufileVerdict> try_cufile_verdict() const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        const gdsroute_file *f = file_;
        return detail::verdict([f](std::uint32_t *r, char *b, std::size_t l, std::size_t *o) {
            return gdsroute_file_cufile_verdict(f, r, b, l, o);
        });
    }
    /** KvikIO's get_compat_mode_manager().is_compat_mode_preferred(): device reads of this file
     * use the POSIX backend (the verdict is not NONE). */
    Result<bool> try_is_compat_mode_preferred() const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        Result<CufileVerdict> v = try_cufile_verdict();
        if (!v.ok()) return Result<bool>(v.error());
        return Result<bool>(!v.value().usable());
    }
    /** Whether the file is registered with cuFile now (asking decides nothing). */
    Result<bool> try_cufile_in_use() const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        bool in_use = false;
        return detail::make(gdsroute_file_cufile_in_use(file_, &in_use), in_use);
    }
    /** Which pool runs the handle's parallel calls ("shared", "drive nvme0", "caller", ...). */
    Result<std::string> try_pool_name() const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        const gdsroute_file *f = file_;
        return detail::text([f](char *b, std::size_t l, std::size_t *o) { return gdsroute_file_pool_name(f, b, l, o); });
    }
    /** This handle's counters. */
    Result<Stats> try_stats() const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        Stats s;
        return detail::make(gdsroute_file_stats(file_, &s), s);
    }
    Result<void> try_stats_reset() const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        return detail::check(gdsroute_file_stats_reset(file_));
    }

    // Reads and writes ------------------------------------------------------------------------
    /** One synchronous read on the calling thread into `buf + buf_offset` (KvikIO's read). */
    Result<std::size_t> try_read(void *buf, std::size_t size, std::uint64_t file_offset = 0,
                                 std::size_t buf_offset = 0) const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        std::size_t n = 0;
        return detail::make(gdsroute_file_read(file_, detail::offset(buf, buf_offset), size, file_offset, &n), n);
    }
    /** A parallel read on the handle's pool (KvikIO's pread); the buffer must stay valid and
     * untouched until the Future ended (or is destroyed). */
    Result<Future> try_pread(void *buf, std::size_t size, std::uint64_t file_offset = 0) const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        gdsroute_op *op = nullptr;
        Status st = gdsroute_file_pread(file_, buf, size, file_offset, &op);
        if (st != GDSROUTE_STATUS_OK) return Result<Future>(ErrorInfo::last(st));
        return Result<Future>(Future(op));
    }
    /** One synchronous write from `buf + buf_offset` (KvikIO's write); all of `size` or an error. */
    Result<std::size_t> try_write(const void *buf, std::size_t size, std::uint64_t file_offset = 0,
                                  std::size_t buf_offset = 0) const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        std::size_t n = 0;
        return detail::make(gdsroute_file_write(file_, detail::offset(buf, buf_offset), size, file_offset, &n), n);
    }
    /** A parallel write (KvikIO's pwrite); the buffer must stay unchanged until it ended. */
    Result<Future> try_pwrite(const void *buf, std::size_t size, std::uint64_t file_offset = 0) const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        gdsroute_op *op = nullptr;
        Status st = gdsroute_file_pwrite(file_, buf, size, file_offset, &op);
        if (st != GDSROUTE_STATUS_OK) return Result<Future>(ErrorInfo::last(st));
        return Result<Future>(Future(op));
    }
    /** A read ordered on the CUDA stream `stream` (a CUstream or cudaStream_t; nullptr: the
     * legacy default stream), into `buf + buf_offset` (KvikIO's read_async by value). */
    Result<StreamFuture> try_read_async(void *buf, std::size_t size, std::uint64_t file_offset = 0,
                                        std::size_t buf_offset = 0, void *stream = nullptr) const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        gdsroute_op *op = nullptr;
        Status st = gdsroute_file_read_async(file_, detail::offset(buf, buf_offset), size, file_offset, stream, &op);
        if (st != GDSROUTE_STATUS_OK) return Result<StreamFuture>(ErrorInfo::last(st));
        return Result<StreamFuture>(StreamFuture(op));
    }
    /** KvikIO's pointer form: size and offset read when the stream reaches the call, the bytes
     * read (-1 on error) written through `bytes_read_p`; all three host-accessible memory. */
    Result<StreamFuture> try_read_async(void *buf, const std::size_t *size_p, const std::uint64_t *file_offset_p,
                                        std::ptrdiff_t *bytes_read_p, void *stream = nullptr) const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        gdsroute_op *op = nullptr;
        Status st = gdsroute_file_read_async_ptr(file_, buf, size_p, file_offset_p, bytes_read_p, stream, &op);
        if (st != GDSROUTE_STATUS_OK) return Result<StreamFuture>(ErrorInfo::last(st));
        return Result<StreamFuture>(StreamFuture(op));
    }
    /** A write ordered on `stream` (KvikIO's write_async by value). */
    Result<StreamFuture> try_write_async(const void *buf, std::size_t size, std::uint64_t file_offset = 0,
                                         std::size_t buf_offset = 0, void *stream = nullptr) const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        gdsroute_op *op = nullptr;
        Status st =
            gdsroute_file_write_async(file_, detail::offset(buf, buf_offset), size, file_offset, stream, &op);
        if (st != GDSROUTE_STATUS_OK) return Result<StreamFuture>(ErrorInfo::last(st));
        return Result<StreamFuture>(StreamFuture(op));
    }
    /** KvikIO's pointer form of write_async. */
    Result<StreamFuture> try_write_async(const void *buf, const std::size_t *size_p,
                                         const std::uint64_t *file_offset_p, std::ptrdiff_t *bytes_written_p,
                                         void *stream = nullptr) const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        gdsroute_op *op = nullptr;
        Status st = gdsroute_file_write_async_ptr(file_, buf, size_p, file_offset_p, bytes_written_p, stream, &op);
        if (st != GDSROUTE_STATUS_OK) return Result<StreamFuture>(ErrorInfo::last(st));
        return Result<StreamFuture>(StreamFuture(op));
    }
    /** fsync(2): writes that finished are on the device. */
    Result<void> try_sync() const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        return detail::check(gdsroute_file_sync(file_));
    }
    /** fdatasync(2). */
    Result<void> try_datasync() const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        return detail::check(gdsroute_file_datasync(file_));
    }
    /** ftruncate(2) to `size` bytes (gdsroute_file_truncate): a shrink drops the tail, later reads
     * stop there; an extension reads as zeros. EBADF for a handle that cannot write. */
    Result<void> try_truncate(std::uint64_t size) const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        return detail::check(gdsroute_file_truncate(file_, size));
    }
    /** An advisory flock(2) lock (gdsroute_file_lock): exclusive or shared; without `wait`, a lock
     * held elsewhere is IO_ERROR with errno EWOULDBLOCK at once. */
    Result<void> try_lock(bool exclusive = true, bool wait = true) const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        return detail::check(gdsroute_file_lock(file_, exclusive, wait));
    }
    /** Releases the handle's flock lock (gdsroute_file_unlock); OK without one. */
    Result<void> try_unlock() const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        return detail::check(gdsroute_file_unlock(file_));
    }
    /** Runs the handle's parallel calls on `pool` from now on (KvikIO's thread_pool argument). An
     * empty Pool (default-constructed, moved from or released) is NULL_ARGUMENT and changes
     * nothing: passing it to the C call would mean "the default pool", a surprise for a Pool that
     * was meant to be a real one; try_reset_pool() says that explicitly. */
    Result<void> try_set_pool(const Pool &pool) const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        if (!pool.valid()) {
            return detail::own_error(GDSROUTE_STATUS_NULL_ARGUMENT,
                                     "gdsroute::File::set_pool: the Pool is empty (default-constructed, moved from "
                                     "or released); reset_pool() goes back to the default pool");
        }
        return detail::check(gdsroute_file_set_pool(file_, pool.native_handle()));
    }
    /** Back to the pool a handle opened now would get. */
    Result<void> try_reset_pool() const {
        if (file_ == nullptr) return detail::closed_error("gdsroute::File");
        return detail::check(gdsroute_file_set_pool(file_, nullptr));
    }

#if GDSROUTE_HPP_EXCEPTIONS
    std::uint64_t nbytes() const { return try_nbytes().value(); }
    int fd() const { return try_fd().value(); }
    int fd_open_flags() const { return try_fd_open_flags().value(); }
    int direct_fd() const { return try_direct_fd().value(); }
    CompatMode compat_mode() const { return try_compat_mode().value(); }
    CufileVerdict cufile_verdict() const { return try_cufile_verdict().value(); }
    bool is_compat_mode_preferred() const { return try_is_compat_mode_preferred().value(); }
    bool cufile_in_use() const { return try_cufile_in_use().value(); }
    std::string pool_name() const { return try_pool_name().value(); }
    Stats stats() const { return try_stats().value(); }
    void stats_reset() const { try_stats_reset().value(); }
    std::size_t read(void *buf, std::size_t size, std::uint64_t file_offset = 0, std::size_t buf_offset = 0) const {
        return try_read(buf, size, file_offset, buf_offset).value();
    }
    Future pread(void *buf, std::size_t size, std::uint64_t file_offset = 0) const {
        return try_pread(buf, size, file_offset).value();
    }
    std::size_t write(const void *buf, std::size_t size, std::uint64_t file_offset = 0,
                      std::size_t buf_offset = 0) const {
        return try_write(buf, size, file_offset, buf_offset).value();
    }
    Future pwrite(const void *buf, std::size_t size, std::uint64_t file_offset = 0) const {
        return try_pwrite(buf, size, file_offset).value();
    }
    StreamFuture read_async(void *buf, std::size_t size, std::uint64_t file_offset = 0, std::size_t buf_offset = 0,
                            void *stream = nullptr) const {
        return try_read_async(buf, size, file_offset, buf_offset, stream).value();
    }
    StreamFuture read_async(void *buf, const std::size_t *size_p, const std::uint64_t *file_offset_p,
                            std::ptrdiff_t *bytes_read_p, void *stream = nullptr) const {
        return try_read_async(buf, size_p, file_offset_p, bytes_read_p, stream).value();
    }
    StreamFuture write_async(const void *buf, std::size_t size, std::uint64_t file_offset = 0,
                             std::size_t buf_offset = 0, void *stream = nullptr) const {
        return try_write_async(buf, size, file_offset, buf_offset, stream).value();
    }
    StreamFuture write_async(const void *buf, const std::size_t *size_p, const std::uint64_t *file_offset_p,
                             std::ptrdiff_t *bytes_written_p, void *stream = nullptr) const {
        return try_write_async(buf, size_p, file_offset_p, bytes_written_p, stream).value();
    }
    void sync() const { try_sync().value(); }
    void datasync() const { try_datasync().value(); }
    void truncate(std::uint64_t size) const { try_truncate(size).value(); }
    void lock(bool exclusive = true, bool wait = true) const { try_lock(exclusive, wait).value(); }
    void unlock() const { try_unlock().value(); }
    void set_pool(const Pool &pool) const { try_set_pool(pool).value(); }
    void reset_pool() const { try_reset_pool().value(); }
#endif

    gdsroute_file *native_handle() const noexcept { return file_; }
    /** Gives up ownership: the caller frees the handle (gdsroute_file_free). */
    gdsroute_file *release() noexcept { return std::exchange(file_, nullptr); }

  private:
    gdsroute_file *file_ = nullptr;
};

/** KvikIO's name. */
using FileHandle = File;

// ---------------------------------------------------------------------------------------------
// Batches
// ---------------------------------------------------------------------------------------------

/** A batch entry's direction: KvikIO's CUfileOpcode_t (CUFILE_READ, CUFILE_WRITE). */
enum class BatchOpcode : std::uint32_t { READ = GDSROUTE_BATCH_READ, WRITE = GDSROUTE_BATCH_WRITE };

/**
 * One read or write of a batch, as KvikIO's BatchOp: `size` bytes between the file at
 * `file_offset` and the buffer at `devPtr_base + devPtr_offset` (any memory kind here: host,
 * pinned, device or managed). `cookie` comes back in the entry's completion (KvikIO's has none:
 * its events carry a cookie gdsroute lets the caller choose).
 */
struct BatchOp {
    const File &file_handle;
    void *devPtr_base;
    std::uint64_t file_offset;
    std::uint64_t devPtr_offset;
    std::size_t size;
    BatchOpcode opcode;
    std::uint64_t cookie = 0;
};

/** A finished entry (gdsroute_batch_completion): cookie, status, errno_value, bytes. */
using BatchEvent = gdsroute_batch_completion;

/**
 * A batch (gdsroute_batch): KvikIO's BatchHandle, on every route (KvikIO's needs cuFile and
 * refuses handles in compat mode). Move-only; the destructor (and close()) cancels the entries
 * not started and waits for the running ones. Each entry's buffer must stay valid until its
 * event was returned by status() or the batch was closed.
 */
class BatchHandle {
  public:
    BatchHandle() noexcept = default;
    /** Takes ownership of a batch from the C API. */
    static BatchHandle adopt(gdsroute_batch *batch) noexcept {
        BatchHandle b;
        b.batch_ = batch;
        return b;
    }
    BatchHandle(BatchHandle &&other) noexcept : batch_(std::exchange(other.batch_, nullptr)) {}
    BatchHandle &operator=(BatchHandle &&other) noexcept {
        if (this != &other) {
            gdsroute_batch_free(batch_);
            batch_ = std::exchange(other.batch_, nullptr);
        }
        return *this;
    }
    BatchHandle(const BatchHandle &) = delete;
    BatchHandle &operator=(const BatchHandle &) = delete;
    ~BatchHandle() { gdsroute_batch_free(batch_); }

    /** Room for `max_num_events` entries in flight (1 to GDSROUTE_BATCH_MAX_ENTRIES). */
    static Result<BatchHandle> try_create(std::size_t max_num_events) {
        gdsroute_batch *raw = nullptr;
        Status st = gdsroute_batch_create(max_num_events, &raw);
        if (st != GDSROUTE_STATUS_OK) return Result<BatchHandle>(ErrorInfo::last(st));
        return Result<BatchHandle>(BatchHandle::adopt(raw));
    }

    /** Submits every op, or none (gdsroute_batch_submit). */
    Result<void> try_submit(const std::vector<BatchOp> &operations) const {
        std::vector<gdsroute_batch_entry> entries;
        entries.reserve(operations.size());
        for (const BatchOp &op : operations) {
            char *buf = detail::offset(op.devPtr_base, static_cast<std::size_t>(op.devPtr_offset));
            entries.push_back(gdsroute_batch_entry{op.file_handle.native_handle(), buf, op.size, op.file_offset,
                                                   static_cast<std::uint32_t>(op.opcode), 0, op.cookie});
        }
        return detail::check(gdsroute_batch_submit(batch_, entries.data(), entries.size()));
    }

    /**
     * Waits for at least `min_nr` entries to complete (at most `timeout`; nullopt: no limit;
     * zero: a poll) and returns up to `max_nr` events, in completion order (KvikIO's status()).
     */
    Result<std::vector<BatchEvent>> try_status(std::size_t min_nr, std::size_t max_nr,
                                               std::optional<std::int64_t> timeout_ns = std::nullopt) const {
        std::vector<BatchEvent> events(max_nr);
        std::size_t n = 0;
        Status st = gdsroute_batch_wait(batch_, min_nr, max_nr, timeout_ns.value_or(-1), events.data(), &n);
        if (st != GDSROUTE_STATUS_OK) return Result<std::vector<BatchEvent>>(ErrorInfo::last(st));
        events.resize(n);
        return Result<std::vector<BatchEvent>>(std::move(events));
    }

    /** Cancels the entries not started; returns how many (gdsroute_batch_cancel). */
    Result<std::size_t> try_cancel() const {
        std::size_t n = 0;
        Status st = gdsroute_batch_cancel(batch_, &n);
        return detail::make(st, n);
    }

    /** Cancels what has not started, waits for the rest and frees the batch; idempotent. */
    void close() noexcept { gdsroute_batch_free(std::exchange(batch_, nullptr)); }
    bool closed() const noexcept { return batch_ == nullptr; }

#if GDSROUTE_HPP_EXCEPTIONS
    /** KvikIO's BatchHandle(max_num_events); throws Error. */
    explicit BatchHandle(std::size_t max_num_events) : BatchHandle(try_create(max_num_events).value()) {}
    void submit(const std::vector<BatchOp> &operations) const { try_submit(operations).value(); }
    std::vector<BatchEvent> status(std::size_t min_nr, std::size_t max_nr,
                                   std::optional<std::int64_t> timeout_ns = std::nullopt) const {
        return try_status(min_nr, max_nr, timeout_ns).value();
    }
    std::size_t cancel() const { return try_cancel().value(); }
#endif

    gdsroute_batch *native_handle() const noexcept { return batch_; }

  private:
    gdsroute_batch *batch_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// MmapHandle
// ---------------------------------------------------------------------------------------------

/**
 * A read-only mapping of a file range (gdsroute_mapping): KvikIO's MmapHandle. Move-only; the
 * destructor unmaps and closes. Reads copy through the kernel, so a truncated file is an error,
 * never a signal. Only flags "r" exist (KvikIO too has no mapped writes).
 */
class MmapHandle {
  public:
    MmapHandle() noexcept = default;
    explicit MmapHandle(gdsroute_mapping *mapping) noexcept : map_(mapping) {}
    MmapHandle(MmapHandle &&other) noexcept : map_(std::exchange(other.map_, nullptr)) {}
    MmapHandle &operator=(MmapHandle &&other) noexcept {
        if (this != &other) {
            gdsroute_mapping_free(map_);
            map_ = std::exchange(other.map_, nullptr);
        }
        return *this;
    }
    MmapHandle(const MmapHandle &) = delete;
    MmapHandle &operator=(const MmapHandle &) = delete;
    ~MmapHandle() { gdsroute_mapping_free(map_); }

    /** Maps `initial_map_size` bytes (nullopt or 0: to the end of the file) from
     * `initial_map_offset` of `path`, read-only. Flags other than "r" are INVALID_FLAGS. */
    static Result<MmapHandle> try_open(const std::string &path, const std::string &flags = "r",
                                       std::optional<std::size_t> initial_map_size = std::nullopt,
                                       std::uint64_t initial_map_offset = 0) {
        if (flags != "r") {
            return Result<MmapHandle>(detail::own_error(
                GDSROUTE_STATUS_INVALID_FLAGS, "gdsroute::MmapHandle: flags \"" + flags +
                                                   "\": only \"r\" is supported (the mapping is read-only)"));
        }
        if (auto bad = detail::path_nul_error(path)) return Result<MmapHandle>(std::move(*bad));
        gdsroute_mapping *raw = nullptr;
        Status st = gdsroute_mapping_open(path.c_str(), initial_map_offset, initial_map_size.value_or(0), &raw);
        if (st != GDSROUTE_STATUS_OK) return Result<MmapHandle>(ErrorInfo::last(st));
        return Result<MmapHandle>(MmapHandle(raw));
    }
#if GDSROUTE_HPP_EXCEPTIONS
    explicit MmapHandle(const std::string &path, const std::string &flags = "r",
                        std::optional<std::size_t> initial_map_size = std::nullopt,
                        std::uint64_t initial_map_offset = 0)
        : MmapHandle(try_open(path, flags, initial_map_size, initial_map_offset).value()) {}
#endif

    /** Unmaps and closes (gdsroute_mapping_close); idempotent. Later reads fail with
     * CLOSED_HANDLE; the destructor frees the handle. */
    void close() noexcept { (void)gdsroute_mapping_close(map_); }
    bool closed() const noexcept {
        bool c = true;
        return map_ == nullptr || gdsroute_mapping_is_closed(map_, &c) != GDSROUTE_STATUS_OK || c;
    }

    Result<std::uint64_t> try_file_size() const {
        if (map_ == nullptr) return detail::closed_error("gdsroute::MmapHandle");
        std::uint64_t n = 0;
        return detail::make(gdsroute_mapping_file_size(map_, &n), n);
    }
    Result<std::size_t> try_initial_map_size() const {
        if (map_ == nullptr) return detail::closed_error("gdsroute::MmapHandle");
        std::size_t n = 0;
        return detail::make(gdsroute_mapping_map_size(map_, &n), n);
    }
    Result<std::uint64_t> try_initial_map_offset() const {
        if (map_ == nullptr) return detail::closed_error("gdsroute::MmapHandle");
        std::uint64_t n = 0;
        return detail::make(gdsroute_mapping_map_offset(map_, &n), n);
    }
    /** Copies `size` bytes at file offset `offset` (nullopt: to the end of the mapped range). */
    Result<std::size_t> try_read(void *buf, std::optional<std::size_t> size = std::nullopt,
                                 std::uint64_t offset = 0) const {
        if (map_ == nullptr) return detail::closed_error("gdsroute::MmapHandle");
        Result<std::size_t> n = resolve(size, offset);
        if (!n.ok()) return n;
        std::size_t got = 0;
        return detail::make(gdsroute_mapping_read(map_, buf, n.value(), offset, &got), got);
    }
    /** A parallel copy in tasks of `task_size` bytes (0: the task size setting). */
    Result<Future> try_pread(void *buf, std::optional<std::size_t> size = std::nullopt, std::uint64_t offset = 0,
                             std::size_t task_size = 0) const {
        if (map_ == nullptr) return detail::closed_error("gdsroute::MmapHandle");
        Result<std::size_t> n = resolve(size, offset);
        if (!n.ok()) return Result<Future>(n.error());
        gdsroute_op *op = nullptr;
        Status st = gdsroute_mapping_pread(map_, buf, n.value(), offset, task_size, &op);
        if (st != GDSROUTE_STATUS_OK) return Result<Future>(ErrorInfo::last(st));
        return Result<Future>(Future(op));
    }

#if GDSROUTE_HPP_EXCEPTIONS
    std::uint64_t file_size() const { return try_file_size().value(); }
    std::size_t initial_map_size() const { return try_initial_map_size().value(); }
    std::uint64_t initial_map_offset() const { return try_initial_map_offset().value(); }
    std::size_t read(void *buf, std::optional<std::size_t> size = std::nullopt, std::uint64_t offset = 0) const {
        return try_read(buf, size, offset).value();
    }
    Future pread(void *buf, std::optional<std::size_t> size = std::nullopt, std::uint64_t offset = 0,
                 std::size_t task_size = 0) const {
        return try_pread(buf, size, offset, task_size).value();
    }
#endif

    gdsroute_mapping *native_handle() const noexcept { return map_; }
    gdsroute_mapping *release() noexcept { return std::exchange(map_, nullptr); }

  private:
    /** The size to read: `size`, or from `offset` to the end of the mapped range. */
    Result<std::size_t> resolve(std::optional<std::size_t> size, std::uint64_t offset) const {
        if (size) return Result<std::size_t>(*size);
        std::uint64_t start = 0;
        std::size_t len = 0;
        Status st = gdsroute_mapping_map_offset(map_, &start);
        if (st == GDSROUTE_STATUS_OK) st = gdsroute_mapping_map_size(map_, &len);
        if (st != GDSROUTE_STATUS_OK) return Result<std::size_t>(ErrorInfo::last(st));
        std::uint64_t end = start + len;
        // Outside the range: size 0 lets the library report the range error with its message.
        return Result<std::size_t>(offset >= start && offset <= end ? static_cast<std::size_t>(end - offset) : 0);
    }

    gdsroute_mapping *map_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Settings (KvikIO's defaults)
// ---------------------------------------------------------------------------------------------

/**
 * The process-wide settings: one getter and setter per gdsroute_settings_get_ and _set_ pair,
 * named as KvikIO's defaults (`gdsroute::defaults` is an alias of this namespace). Each setting
 * also has a tag type (settings::TaskSize, ...) for settings::Scoped, which sets a value and
 * restores the previous one when it goes out of scope.
 */
namespace settings {

#define GDSROUTE_HPP_SETTING(Tag, name, cname, Type, CType)                                                      \
    struct Tag {                                                                                                \
        using value_type = Type;                                                                                \
        static Result<Type> get() {                                                                             \
            CType v{};                                                                                          \
            Status st = gdsroute_settings_get_##cname(&v);                                                      \
            return detail::make(st, static_cast<Type>(v));                                                      \
        }                                                                                                       \
        static Result<void> set(Type v) {                                                                       \
            return detail::check(gdsroute_settings_set_##cname(static_cast<CType>(v)));                         \
        }                                                                                                       \
    };                                                                                                          \
    inline Result<Type> try_##name() { return Tag::get(); }                                                     \
    inline Result<void> try_set_##name(Type v) { return Tag::set(v); }                                          \
    GDSROUTE_HPP_SETTING_THROWING(name, Type)

#if GDSROUTE_HPP_EXCEPTIONS
#define GDSROUTE_HPP_SETTING_THROWING(name, Type)                                                                \
    inline Type name() { return try_##name().value(); }                                                         \
    inline void set_##name(Type v) { try_set_##name(v).value(); }
#else
#define GDSROUTE_HPP_SETTING_THROWING(name, Type)
#endif

/** The default compat mode for files opened from now on (KVIKIO_COMPAT_MODE). */
GDSROUTE_HPP_SETTING(CompatModeSetting, compat_mode, compat_mode, CompatMode, std::uint32_t)
/** Threads of the shared pool, 1 to GDSROUTE_MAX_THREADS (KVIKIO_NTHREADS). */
GDSROUTE_HPP_SETTING(NumThreads, num_threads, num_threads, std::size_t, std::size_t)
/** Task size in bytes (KVIKIO_TASK_SIZE). */
GDSROUTE_HPP_SETTING(TaskSize, task_size, task_size, std::size_t, std::size_t)
/** The smallest task a small parallel read is spread into (GDSROUTE_MIN_TASK_SIZE; 0: KvikIO's split). */
GDSROUTE_HPP_SETTING(MinTaskSize, min_task_size, min_task_size, std::size_t, std::size_t)
/** Device requests below this many bytes use the POSIX backend (KVIKIO_GDS_THRESHOLD). */
GDSROUTE_HPP_SETTING(GdsThreshold, gds_threshold, gds_threshold, std::size_t, std::size_t)
/** Bounce buffer size (KVIKIO_BOUNCE_BUFFER_SIZE). */
GDSROUTE_HPP_SETTING(BounceBufferSize, bounce_buffer_size, bounce_buffer_size, std::size_t, std::size_t)
/** Whether cuFile's own statistics are collected (GDSROUTE_CUFILE_STATS). */
GDSROUTE_HPP_SETTING(CufileStats, cufile_stats, cufile_stats, bool, bool)
/** Most page-cache bytes the registered page cache may pin (GDSROUTE_PAGE_CACHE_PIN_MAX). */
GDSROUTE_HPP_SETTING(PageCachePinMax, page_cache_pin_max, page_cache_pin_max, std::uint64_t, std::uint64_t)
/** The descriptor registered with cuFile (GDSROUTE_CUFILE_FD). */
GDSROUTE_HPP_SETTING(CufileFdSetting, cufile_fd, cufile_fd, CufileFd, std::uint32_t)
/** Direct I/O for POSIX reads (KVIKIO_AUTO_DIRECT_IO_READ). */
GDSROUTE_HPP_SETTING(AutoDirectIoRead, auto_direct_io_read, auto_direct_io_read, bool, bool)
/** Direct I/O for POSIX writes (KVIKIO_AUTO_DIRECT_IO_WRITE; default off, unlike KvikIO). */
GDSROUTE_HPP_SETTING(AutoDirectIoWrite, auto_direct_io_write, auto_direct_io_write, bool, bool)
/** When stream-ordered calls queue on their stream (GDSROUTE_STREAM_ORDERED; default AUTO). */
GDSROUTE_HPP_SETTING(StreamOrdered, stream_ordered, stream_ordered, StreamOrderedMode, std::uint32_t)
/** cuFileReadAsync/WriteAsync on registered streams (GDSROUTE_CUFILE_ASYNC=native). */
GDSROUTE_HPP_SETTING(CufileAsyncNative, cufile_async_native, cufile_async_native, bool, bool)
/** Prepare the device route at open (GDSROUTE_PREPARE_AT_OPEN). */
GDSROUTE_HPP_SETTING(PrepareAtOpen, prepare_at_open, prepare_at_open, bool, bool)
/** A pool per drive (KVIKIO_THREAD_POOL_PER_BLOCK_DEVICE). */
GDSROUTE_HPP_SETTING(ThreadPoolPerBlockDevice, thread_pool_per_block_device, thread_pool_per_block_device, bool,
                     bool)
/** Relay stream-ordered calls on streams the legacy default stream waits for (GDSROUTE_STREAM_RELAY). */
GDSROUTE_HPP_SETTING(StreamRelay, stream_relay, stream_relay, bool, bool)

#undef GDSROUTE_HPP_SETTING
#undef GDSROUTE_HPP_SETTING_THROWING

/** KvikIO's names for the thread count. */
inline Result<std::size_t> try_thread_pool_nthreads() { return NumThreads::get(); }
inline Result<void> try_set_thread_pool_nthreads(std::size_t n) { return NumThreads::set(n); }
/** KvikIO's defaults::is_compat_mode_preferred(): cuFile cannot serve device reads in this
 * process (try_cufile_usable negated; may open cuFile's driver unless compat mode is ON). */
inline Result<bool> try_is_compat_mode_preferred() {
    Result<CufileVerdict> v = try_cufile_usable();
    if (!v.ok()) return Result<bool>(v.error());
    return Result<bool>(!v.value().usable());
}
#if GDSROUTE_HPP_EXCEPTIONS
inline std::size_t thread_pool_nthreads() { return try_thread_pool_nthreads().value(); }
inline void set_thread_pool_nthreads(std::size_t n) { try_set_thread_pool_nthreads(n).value(); }
inline bool is_compat_mode_preferred() { return try_is_compat_mode_preferred().value(); }
#endif

/**
 * Sets the setting `S` (a tag above) and restores the value it had before when destroyed
 * (errors of that restore are ignored: a value read from the library is set back). Move-only;
 * a moved-from guard restores nothing. Guards of one setting nest when destroyed in reverse
 * order; settings are process-wide, so guards on several threads race.
 */
template <class S> class [[nodiscard]] Scoped {
  public:
    using value_type = typename S::value_type;

    static Result<Scoped> try_set(value_type value) {
        Result<value_type> previous = S::get();
        if (!previous.ok()) return Result<Scoped>(previous.error());
        Result<void> set = S::set(value);
        if (!set.ok()) return Result<Scoped>(set.error());
        return Result<Scoped>(Scoped(Restore{}, previous.value()));
    }
#if GDSROUTE_HPP_EXCEPTIONS
    explicit Scoped(value_type value) : Scoped(try_set(value).value()) {}
#endif
    Scoped(Scoped &&other) noexcept : previous_(std::move(other.previous_)) { other.previous_.reset(); }
    Scoped &operator=(Scoped &&) = delete;
    Scoped(const Scoped &) = delete;
    Scoped &operator=(const Scoped &) = delete;
    ~Scoped() { (void)restore(); }

    /** The value restored at the end (nullopt once restored or moved from). */
    const std::optional<value_type> &previous() const noexcept { return previous_; }
    /** Restores the previous value now; later calls and the destructor do nothing. */
    Result<void> restore() {
        if (!previous_) return Result<void>();
        value_type v = *previous_;
        previous_.reset();
        return S::set(v);
    }

  private:
    struct Restore {};
    Scoped(Restore, value_type previous) : previous_(previous) {}
    std::optional<value_type> previous_;
};

} // namespace settings

/** KvikIO's spelling: gdsroute::defaults::task_size(), ... */
namespace defaults = settings;

// ---------------------------------------------------------------------------------------------
// Buffer registration
// ---------------------------------------------------------------------------------------------

/** cuFileBufRegister of `size` bytes at `ptr` (reference-counted; a counted no-op where cuFile
 * is not used, compat mode ON included). */
inline Result<void> try_buffer_register(const void *ptr, std::size_t size, int flags = 0) {
    return detail::check(gdsroute_buffer_register(ptr, size, flags));
}
inline Result<void> try_buffer_deregister(const void *ptr) { return detail::check(gdsroute_buffer_deregister(ptr)); }
/** Registers the whole CUDA allocation `ptr` points into. */
inline Result<void> try_memory_register(const void *ptr, int flags = 0) {
    return detail::check(gdsroute_memory_register(ptr, flags));
}
inline Result<void> try_memory_deregister(const void *ptr) { return detail::check(gdsroute_memory_deregister(ptr)); }
/** The registrations gdsroute holds on the buffer registered at `ptr` (0: none). */
inline Result<std::uint64_t> try_buffer_references(const void *ptr) {
    std::uint64_t n = 0;
    return detail::make(gdsroute_buffer_references(ptr, &n), n);
}
/** Host, device or managed memory (KvikIO's is_host_memory); HOST while libcuda is not loaded. */
inline Result<MemoryKind> try_memory_kind(const void *ptr) {
    std::uint32_t kind = GDSROUTE_OBSERVED_MEMORY_HOST;
    Status st = gdsroute_memory_kind(ptr, &kind);
    return detail::make(st, static_cast<MemoryKind>(kind));
}
#if GDSROUTE_HPP_EXCEPTIONS
inline MemoryKind memory_kind(const void *ptr) { return try_memory_kind(ptr).value(); }
inline void buffer_register(const void *ptr, std::size_t size, int flags = 0) {
    try_buffer_register(ptr, size, flags).value();
}
inline void buffer_deregister(const void *ptr) { try_buffer_deregister(ptr).value(); }
inline void memory_register(const void *ptr, int flags = 0) { try_memory_register(ptr, flags).value(); }
inline void memory_deregister(const void *ptr) { try_memory_deregister(ptr).value(); }
inline std::uint64_t buffer_references(const void *ptr) { return try_buffer_references(ptr).value(); }
#endif

/**
 * One registration held for a scope: BufferRegistration (buffer_register of ptr and size) or
 * MemoryRegistration (memory_register of the allocation). The destructor deregisters, ignoring
 * errors; call deregister() to see them. Move-only; a moved-from guard holds nothing.
 */
template <bool Memory> class [[nodiscard]] Registration {
  public:
    Registration() noexcept = default;
    Registration(Registration &&other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)) {}
    Registration &operator=(Registration &&other) noexcept {
        if (this != &other) {
            (void)deregister();
            ptr_ = std::exchange(other.ptr_, nullptr);
        }
        return *this;
    }
    Registration(const Registration &) = delete;
    Registration &operator=(const Registration &) = delete;
    ~Registration() { (void)deregister(); }

    /** Drops the registration now (once); later calls and the destructor do nothing. */
    Result<void> deregister() {
        const void *p = std::exchange(ptr_, nullptr);
        if (p == nullptr) return Result<void>();
        return Memory ? try_memory_deregister(p) : try_buffer_deregister(p);
    }
    bool active() const noexcept { return ptr_ != nullptr; }
    const void *ptr() const noexcept { return ptr_; }

  protected:
    struct Adopt {};
    Registration(Adopt, const void *ptr) noexcept : ptr_(ptr) {}

  private:
    const void *ptr_ = nullptr;
};

class [[nodiscard]] BufferRegistration : public Registration<false> {
  public:
    BufferRegistration() noexcept = default;
    static Result<BufferRegistration> try_register(const void *ptr, std::size_t size, int flags = 0) {
        Result<void> r = try_buffer_register(ptr, size, flags);
        if (!r.ok()) return Result<BufferRegistration>(r.error());
        return Result<BufferRegistration>(BufferRegistration(Adopt{}, ptr));
    }
#if GDSROUTE_HPP_EXCEPTIONS
    BufferRegistration(const void *ptr, std::size_t size, int flags = 0)
        : BufferRegistration(try_register(ptr, size, flags).value()) {}
#endif

  private:
    BufferRegistration(Adopt tag, const void *ptr) noexcept : Registration<false>(tag, ptr) {}
};

class [[nodiscard]] MemoryRegistration : public Registration<true> {
  public:
    MemoryRegistration() noexcept = default;
    static Result<MemoryRegistration> try_register(const void *ptr, int flags = 0) {
        Result<void> r = try_memory_register(ptr, flags);
        if (!r.ok()) return Result<MemoryRegistration>(r.error());
        return Result<MemoryRegistration>(MemoryRegistration(Adopt{}, ptr));
    }
#if GDSROUTE_HPP_EXCEPTIONS
    explicit MemoryRegistration(const void *ptr, int flags = 0)
        : MemoryRegistration(try_register(ptr, flags).value()) {}
#endif

  private:
    MemoryRegistration(Adopt tag, const void *ptr) noexcept : Registration<true>(tag, ptr) {}
};

// ---------------------------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------------------------

/** KvikIO's stream_register: optional; cuFile's registration only under
 * GDSROUTE_CUFILE_ASYNC=native. Unlike KvikIO, errors are reported. */
inline Result<void> try_stream_register(void *stream, unsigned flags) {
    return detail::check(gdsroute_stream_register(stream, flags));
}
inline Result<void> try_stream_deregister(void *stream) { return detail::check(gdsroute_stream_deregister(stream)); }
#if GDSROUTE_HPP_EXCEPTIONS
inline void stream_register(void *stream, unsigned flags) { try_stream_register(stream, flags).value(); }
inline void stream_deregister(void *stream) { try_stream_deregister(stream).value(); }
#endif

// ---------------------------------------------------------------------------------------------
// cuFile's driver (KvikIO's DriverProperties)
// ---------------------------------------------------------------------------------------------

/** cuFile's driver properties now (gdsroute_driver_properties_get): opens cuFile's driver if it
 * is not open; CUFILE_UNAVAILABLE under compat mode ON or where cuFile cannot be used. */
inline Result<gdsroute_driver_properties> try_driver_properties() {
    gdsroute_driver_properties p{};
    p.struct_size = sizeof p;
    return detail::make(gdsroute_driver_properties_get(&p), p);
}

/**
 * KvikIO's DriverProperties. The getters read cuFile's properties once (at the first getter,
 * which opens cuFile's driver) and keep them. The setters are gdsroute_driver_set_*: cuFile reads
 * its settings only when its driver opens, so they must come before any getter, device read,
 * registration or gdsroute_begin_device_setup (else CUFILE_DRIVER_OPEN). The C ABI sets poll mode
 * and threshold together: set_nvfs_poll_mode and set_nvfs_poll_thresh_size send the half they do
 * not set as this object last set it (poll mode off and 4 KiB, cuFile's defaults, until then);
 * set_nvfs_poll sets both.
 */
class DriverProperties {
  public:
    Result<gdsroute_driver_properties> try_properties() {
        if (!props_) {
            Result<gdsroute_driver_properties> p = try_driver_properties();
            if (!p.ok()) return p;
            props_ = p.value();
        }
        return Result<gdsroute_driver_properties>(*props_);
    }
    /** nvidia-fs is loaded (its version is not 0.0); false also where the properties cannot be
     * read, as KvikIO's. */
    bool is_gds_available() {
        Result<gdsroute_driver_properties> p = try_properties();
        return p.ok() && (p.value().nvfs_major != 0 || p.value().nvfs_minor != 0);
    }
    Result<void> try_set_nvfs_poll(bool enabled, std::size_t threshold_kb) {
        Result<void> r = detail::check(gdsroute_driver_set_poll_mode(enabled, threshold_kb));
        if (r.ok()) {
            poll_mode_ = enabled;
            poll_thresh_kb_ = threshold_kb;
        }
        return r;
    }
    Result<void> try_set_nvfs_poll_mode(bool enabled) { return try_set_nvfs_poll(enabled, poll_thresh_kb_); }
    Result<void> try_set_nvfs_poll_thresh_size(std::size_t kb) { return try_set_nvfs_poll(poll_mode_, kb); }
    Result<void> try_set_max_device_cache_size(std::size_t kb) {
        return detail::check(gdsroute_driver_set_max_cache_size(kb));
    }
    Result<void> try_set_max_pinned_memory_size(std::size_t kb) {
        return detail::check(gdsroute_driver_set_max_pinned_memory_size(kb));
    }
    Result<void> try_set_max_direct_io_size(std::size_t kb) {
        return detail::check(gdsroute_driver_set_max_direct_io_size(kb));
    }

#if GDSROUTE_HPP_EXCEPTIONS
    const gdsroute_driver_properties &properties() {
        (void)try_properties().value();
        return *props_;
    }
    std::uint64_t get_nvfs_major_version() { return properties().nvfs_major; }
    std::uint64_t get_nvfs_minor_version() { return properties().nvfs_minor; }
    bool get_nvfs_allow_compat_mode() { return properties().allow_compat_mode != 0; }
    bool get_nvfs_poll_mode() { return properties().poll_mode != 0; }
    std::size_t get_nvfs_poll_thresh_size() { return static_cast<std::size_t>(properties().poll_threshold_kb); }
    unsigned get_nvfs_statusflags() { return static_cast<unsigned>(properties().status_flags); }
    std::size_t get_max_device_cache_size() {
        return static_cast<std::size_t>(properties().max_device_cache_size_kb);
    }
    std::size_t get_per_buffer_cache_size() {
        return static_cast<std::size_t>(properties().per_buffer_cache_size_kb);
    }
    std::size_t get_max_pinned_memory_size() {
        return static_cast<std::size_t>(properties().max_device_pinned_mem_size_kb);
    }
    std::size_t get_max_batch_io_size() { return static_cast<std::size_t>(properties().max_batch_io_size); }
    void set_nvfs_poll(bool enabled, std::size_t threshold_kb) { try_set_nvfs_poll(enabled, threshold_kb).value(); }
    void set_nvfs_poll_mode(bool enabled) { try_set_nvfs_poll_mode(enabled).value(); }
    void set_nvfs_poll_thresh_size(std::size_t kb) { try_set_nvfs_poll_thresh_size(kb).value(); }
    void set_max_device_cache_size(std::size_t kb) { try_set_max_device_cache_size(kb).value(); }
    void set_max_pinned_memory_size(std::size_t kb) { try_set_max_pinned_memory_size(kb).value(); }
    void set_max_direct_io_size(std::size_t kb) { try_set_max_direct_io_size(kb).value(); }
#endif

  private:
    std::optional<gdsroute_driver_properties> props_;
    bool poll_mode_ = false;
    std::size_t poll_thresh_kb_ = 4;
};

// ---------------------------------------------------------------------------------------------
// Process: set-up, shutdown, diagnosis, bounce buffers
// ---------------------------------------------------------------------------------------------

/** Starts CUDA's and cuFile's set-up on a background thread (gdsroute_begin_device_setup). */
inline Result<void> try_begin_device_setup() { return detail::check(gdsroute_begin_device_setup()); }
/** Closes gdsroute's cuFile driver reference (optional; done at exit). */
inline Result<void> try_shutdown() { return detail::check(gdsroute_shutdown()); }
/** The routing report (gdsroute_diagnose), for `path` when not empty. */
inline Result<std::string> try_diagnose(const std::string &path = std::string()) {
    if (auto bad = detail::path_nul_error(path)) return Result<std::string>(std::move(*bad));
    const char *p = path.empty() ? nullptr : path.c_str();
    return detail::text([p](char *b, std::size_t l, std::size_t *o) { return gdsroute_diagnose(p, b, l, o); });
}
/** Frees the pinned bounce buffers no transfer holds; the bytes unpinned. */
inline Result<std::size_t> try_bounce_buffer_free() {
    std::size_t n = 0;
    return detail::make(gdsroute_bounce_buffer_free(&n), n);
}
#if GDSROUTE_HPP_EXCEPTIONS
inline void begin_device_setup() { try_begin_device_setup().value(); }
inline void shutdown() { try_shutdown().value(); }
inline std::string diagnose(const std::string &path = std::string()) { return try_diagnose(path).value(); }
inline std::size_t bounce_buffer_free() { return try_bounce_buffer_free().value(); }
inline CufileVerdict cufile_usable() { return try_cufile_usable().value(); }
#endif

// ---------------------------------------------------------------------------------------------
// Page cache and file tools (KvikIO's file_utils)
// ---------------------------------------------------------------------------------------------

/** {resident pages, total pages} of `[offset, offset + length)` (length 0: to the end). */
inline Result<std::pair<std::uint64_t, std::uint64_t>> try_get_page_cache_info(const std::string &path,
                                                                               std::uint64_t offset = 0,
                                                                               std::uint64_t length = 0) {
    if (auto bad = detail::path_nul_error(path)) {
        return Result<std::pair<std::uint64_t, std::uint64_t>>(std::move(*bad));
    }
    std::uint64_t resident = 0, total = 0;
    Status st = gdsroute_page_cache_info(path.c_str(), offset, length, &resident, &total);
    return detail::make(st, std::make_pair(resident, total));
}
/** Drops the range from the page cache, after writing its dirty pages back if `sync_first`. */
inline Result<void> try_drop_file_page_cache(const std::string &path, std::uint64_t offset = 0,
                                             std::uint64_t length = 0, bool sync_first = true) {
    if (auto bad = detail::path_nul_error(path)) return Result<void>(std::move(*bad));
    return detail::check(gdsroute_page_cache_drop(path.c_str(), offset, length, sync_first));
}
/** Drops the system's page cache (needs root). */
inline Result<void> try_drop_system_page_cache() { return detail::check(gdsroute_page_cache_drop_system()); }
/** Whether the file at `path` can be opened with O_DIRECT. */
inline Result<bool> try_supports_direct_io(const std::string &path) {
    if (auto bad = detail::path_nul_error(path)) return Result<bool>(std::move(*bad));
    bool s = false;
    return detail::make(gdsroute_supports_direct_io(path.c_str(), &s), s);
}
#if GDSROUTE_HPP_EXCEPTIONS
inline std::pair<std::uint64_t, std::uint64_t> get_page_cache_info(const std::string &path, std::uint64_t offset = 0,
                                                                   std::uint64_t length = 0) {
    return try_get_page_cache_info(path, offset, length).value();
}
inline void drop_file_page_cache(const std::string &path, std::uint64_t offset = 0, std::uint64_t length = 0,
                                 bool sync_first = true) {
    try_drop_file_page_cache(path, offset, length, sync_first).value();
}
inline void drop_system_page_cache() { try_drop_system_page_cache().value(); }
inline bool supports_direct_io(const std::string &path) { return try_supports_direct_io(path).value(); }
#endif

// ---------------------------------------------------------------------------------------------
// Seeing what it does: the exit report and monitors (docs/observing.md)
// ---------------------------------------------------------------------------------------------

/** Adds `delta` to the counter `name` of `section` in the exit report (gdsroute_report_add_counter):
 * a library built on gdsroute reports its own counters beside the routes. */
inline Result<void> try_report_add_counter(const std::string &section, const std::string &name, std::uint64_t delta) {
    if (auto bad = detail::nul_byte_error(GDSROUTE_STATUS_INVALID_ARGUMENT, "section", section)) {
        return Result<void>(std::move(*bad));
    }
    if (auto bad = detail::nul_byte_error(GDSROUTE_STATUS_INVALID_ARGUMENT, "name", name)) {
        return Result<void>(std::move(*bad));
    }
    return detail::check(gdsroute_report_add_counter(section.c_str(), name.c_str(), delta));
}
/** The exit report now, as text or one JSON object (gdsroute_report_render). */
inline Result<std::string> try_report(bool json = false) {
    const gdsroute_stats_format format = json ? GDSROUTE_STATS_FORMAT_JSON : GDSROUTE_STATS_FORMAT_TEXT;
    return detail::text([format](char *b, std::size_t l, std::size_t *o) { return gdsroute_report_render(format, b, l, o); });
}

inline namespace GDSROUTE_HPP_MODE {

/**
 * A monitor (gdsroute_monitor_add) for as long as this object lives: `callback` sees every
 * logical call as it ends, and every task too when `tasks` is true (KvikIO 26.10's monitors, which
 * see neither stream-ordered calls nor tasks). Move-only; destroying it removes the monitor and
 * waits for its callbacks running on other threads. The callback runs on the thread that ended
 * the call and must be short and not wait for the operation it observes; an exception it throws is
 * caught and dropped (it must not cross the C ABI). The observation is valid during the callback.
 * The callback may remove (or destroy) its own Monitor: the callback and its captures then live
 * until it returns.
 */
class Monitor {
  public:
    using Callback = std::function<void(const gdsroute_observation &)>;

    static Result<Monitor> try_add(Callback callback, bool tasks = false) {
        if (!callback) return Result<Monitor>(detail::own_error(GDSROUTE_STATUS_NULL_ARGUMENT, "the monitor's callback is empty"));
        auto held = std::make_shared<Held>(std::move(callback));
        std::uint64_t id = 0;
        Status st = gdsroute_monitor_add(&Monitor::trampoline, held.get(), tasks ? GDSROUTE_MONITOR_TASKS : 0u, &id);
        if (st != GDSROUTE_STATUS_OK) return Result<Monitor>(detail::check(st).error());
        return Result<Monitor>(Monitor(id, std::move(held)));
    }
#if GDSROUTE_HPP_EXCEPTIONS
    static Monitor add(Callback callback, bool tasks = false) { return try_add(std::move(callback), tasks).value(); }
#endif

    Monitor(Monitor &&other) noexcept : id_(other.id_), held_(std::move(other.held_)) { other.id_ = 0; }
    Monitor &operator=(Monitor &&other) noexcept {
        if (this != &other) {
            remove();
            id_ = other.id_;
            held_ = std::move(other.held_);
            other.id_ = 0;
        }
        return *this;
    }
    Monitor(const Monitor &) = delete;
    Monitor &operator=(const Monitor &) = delete;
    ~Monitor() { remove(); }

    /** The monitor's id (0 once removed or moved from). */
    std::uint64_t id() const noexcept { return id_; }
    /** Removes it now (as the destructor does); later calls do nothing. */
    void remove() noexcept {
        if (id_ != 0) {
            (void)gdsroute_monitor_remove(id_);
            id_ = 0;
        }
        // Other threads' callbacks have returned (gdsroute_monitor_remove waited for them); one
        // running on this thread, which removed its own monitor, holds its own reference.
        held_.reset();
    }

  private:
    /** The callback, shared between the Monitor and each of its invocations in progress. */
    struct Held : std::enable_shared_from_this<Held> {
        explicit Held(Callback cb) : callback(std::move(cb)) {}
        Callback callback;
    };

    Monitor(std::uint64_t id, std::shared_ptr<Held> held) : id_(id), held_(std::move(held)) {}
    static void trampoline(const gdsroute_observation *observation, void *user_data) {
        // Taken before the callback runs: a callback that removes its own Monitor frees the
        // Monitor's reference, not the callback that is still running.
        std::shared_ptr<Held> keep = static_cast<Held *>(user_data)->shared_from_this();
#if GDSROUTE_HPP_EXCEPTIONS
        try {
            keep->callback(*observation);
        } catch (...) {
        }
#else
        keep->callback(*observation);
#endif
    }
    std::uint64_t id_ = 0;
    std::shared_ptr<Held> held_;
};

} // namespace GDSROUTE_HPP_MODE

#if GDSROUTE_HPP_EXCEPTIONS
inline void report_add_counter(const std::string &section, const std::string &name, std::uint64_t delta) {
    try_report_add_counter(section, name, delta).value();
}
inline std::string report(bool json = false) { return try_report(json).value(); }
#endif

} // namespace gdsroute

#undef GDSROUTE_HPP_MODE

#endif /* GDSROUTE_HPP */
