// The C++ API (include/gdsroute.hpp) on host memory: reads and writes of random data with guard
// bytes, every error path through the non-throwing form (Result) and, where exceptions are on,
// through gdsroute::Error; move semantics, the settings guard, stats printing, the mapping handle,
// pools, registration (a counted no-op under compat mode ON), driver properties, the page-cache
// tools, the file drivers' calls (exclusive creation, a handle from a descriptor, truncate,
// locks). Built under C++17, C++20 and C++23 and with -fno-exceptions (tests/c/CMakeLists.txt).
// `test_cpp_api abort` calls value() of a failed Result: without exceptions it must print the
// error and abort, with them throw.
#include <gdsroute.hpp>

#include "check.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

constexpr std::size_t kGuard = 64;
constexpr unsigned char kGuardByte = 0xA5;

// A buffer with guard bytes on both sides, checked for writes outside [0, size).
struct Guarded {
    explicit Guarded(std::size_t n) : bytes(n + 2 * kGuard, kGuardByte), size(n) {}
    unsigned char *data() { return bytes.data() + kGuard; }
    bool guards_intact() const {
        for (std::size_t i = 0; i < kGuard; i++) {
            if (bytes[i] != kGuardByte || bytes[kGuard + size + i] != kGuardByte) return false;
        }
        return true;
    }
    std::vector<unsigned char> bytes;
    std::size_t size;
};

std::vector<unsigned char> random_bytes(std::size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::vector<unsigned char> v(n);
    for (auto &b : v) b = static_cast<unsigned char>(gen() & 0xFF);
    return v;
}

bool contains(const std::string &hay, const std::string &needle) { return hay.find(needle) != std::string::npos; }

// The result failed with `status` (and `err` as errno when not -1) and a message containing `needle`.
template <class R> void expect_error(const R &r, gdsroute::Status status, int err, const char *needle, int line) {
    bool good = !r.ok() && r.status() == status && (err < 0 || r.os_errno() == err) && !r.message().empty() &&
                contains(r.message(), needle);
    if (good) {
        check_passed++;
    } else {
        check_failed++;
        std::fprintf(stderr, "%s:%d: expected %s (errno %d, \"%s\"), got ok=%d %s errno %d: %s\n", __FILE__, line,
                     gdsroute::status_str(status), err, needle, r.ok() ? 1 : 0, gdsroute::status_str(r.status()),
                     static_cast<int>(r.os_errno()), r.message().c_str());
    }
}
#define EXPECT_ERROR(r, status, err, needle) expect_error((r), (status), (err), (needle), __LINE__)

#if GDSROUTE_HPP_EXCEPTIONS
// The call throws gdsroute::Error with `status` (and errno `err` when not -1), what() containing `needle`.
template <class F> void expect_throw(F f, gdsroute::Status status, int err, const char *needle, int line) {
    try {
        f();
        check_failed++;
        std::fprintf(stderr, "%s:%d: no exception (expected %s)\n", __FILE__, line, gdsroute::status_str(status));
    } catch (const gdsroute::Error &e) {
        bool good = e.status() == status && (err < 0 || e.os_errno() == err) && contains(e.what(), needle) &&
                    std::string(e.status_name()) == gdsroute::status_str(status);
        if (good) {
            check_passed++;
        } else {
            check_failed++;
            std::fprintf(stderr, "%s:%d: expected %s (errno %d, \"%s\"), caught %s errno %d: %s\n", __FILE__, line,
                         gdsroute::status_str(status), err, needle, e.status_name(), static_cast<int>(e.os_errno()),
                         e.what());
        }
    }
}
#define EXPECT_THROW(body, status, err, needle) expect_throw([&] { body; }, (status), (err), (needle), __LINE__)
#endif

std::string temp_dir() {
    const char *base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/gdsroute-cpp-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) == nullptr) {
        std::perror("mkdtemp");
        std::exit(2);
    }
    return std::string(buf.data());
}

// Reads and writes, both forms; the data round-trips with the guards intact.
void test_io(const std::string &dir) {
    const std::string path = dir + "/io.bin";
    const std::size_t n = (3u << 20) + 12345; // not a multiple of the task size
    const auto data = random_bytes(n, 1);

    {
        auto opened = gdsroute::File::try_open(path, "w+", 0600);
        CHECK(opened.ok());
        if (!opened.ok()) return;
        gdsroute::File f = std::move(opened).value();
        CHECK(!f.closed());
        auto w = f.try_write(data.data(), 1000, 0);
        CHECK(w.ok() && w.value() == 1000);
        auto pw = f.try_pwrite(data.data() + 1000, n - 1000, 1000);
        CHECK(pw.ok());
        if (pw.ok()) {
            auto got = pw.value().try_get();
            CHECK(got.ok() && got.value() == n - 1000);
            CHECK(pw.value().is_ready());
            auto again = pw.value().try_get(); // may be asked again
            CHECK(again.ok() && again.value() == n - 1000);
        }
        CHECK(f.try_sync().ok());
        CHECK(f.try_datasync().ok());
        auto size = f.try_nbytes();
        CHECK(size.ok() && size.value() == n);
        auto fd = f.try_fd();
        CHECK(fd.ok() && fd.value() >= 0);
        auto flags = f.try_fd_open_flags();
        CHECK(flags.ok() && (flags.value() & O_ACCMODE) == O_RDWR);
        auto dfd = f.try_direct_fd();
        CHECK(dfd.ok() && dfd.value() == -1);

        // Read back: synchronous, into the middle of a guarded buffer through buf_offset.
        Guarded g(n);
        auto r = f.try_read(g.data() - 10, n, 0, 10);
        CHECK(r.ok() && r.value() == n);
        CHECK(std::memcmp(g.data(), data.data(), n) == 0);
        CHECK(g.guards_intact());

        // Parallel, from an offset; a short read at the end of the file is success.
        Guarded h(n);
        auto pr = f.try_pread(h.data(), n, 77);
        CHECK(pr.ok());
        if (pr.ok()) {
            pr.value().wait();
            CHECK(pr.value().is_ready());
            auto p = pr.value().try_poll();
            CHECK(p.ok() && p.value());
            auto got = pr.value().try_get();
            CHECK(got.ok() && got.value() == n - 77);
        }
        CHECK(std::memcmp(h.data(), data.data() + 77, n - 77) == 0);
        CHECK(h.guards_intact());
        auto past = f.try_read(h.data(), 16, n + 5);
        CHECK(past.ok() && past.value() == 0);
    }

#if GDSROUTE_HPP_EXCEPTIONS
    {
        gdsroute::FileHandle f(path, "r+");
        const auto more = random_bytes(4096, 2);
        CHECK(f.write(more.data(), more.size(), n) == more.size());
        gdsroute::Future fut = f.pwrite(more.data(), more.size(), 4096);
        CHECK(fut.get() == more.size());
        CHECK(f.nbytes() == n + more.size());
        Guarded g(8192);
        CHECK(f.read(g.data(), 8192, 0) == 8192);
        CHECK(std::memcmp(g.data(), data.data(), 4096) == 0);
        CHECK(std::memcmp(g.data() + 4096, more.data(), 4096) == 0);
        CHECK(g.guards_intact());
        Guarded h(4096);
        auto pr = f.pread(h.data(), 4096, n);
        CHECK(pr.valid());
        CHECK(pr.get() == 4096);
        CHECK(pr.poll());
        CHECK(std::memcmp(h.data(), more.data(), 4096) == 0);
        CHECK(h.guards_intact());
        CHECK((f.fd_open_flags() & O_ACCMODE) == O_RDWR);
        CHECK(f.fd() >= 0);
        f.sync();
        f.datasync();
    }
#endif
}

// Stream-ordered calls: with no CUDA driver they fail at the call; where it is there, they run.
void test_async(const std::string &dir) {
    const std::string path = dir + "/async.bin";
    auto f = gdsroute::File::try_open(path, "w+");
    CHECK(f.ok());
    if (!f.ok()) return;
    std::vector<unsigned char> buf(4096, 7);
    auto w = f.value().try_write_async(buf.data(), buf.size(), 0);
    if (w.ok()) {
        auto got = w.value().try_get();
        CHECK(got.ok() && got.value() == buf.size());
    } else {
        CHECK(w.status() == GDSROUTE_STATUS_CUDA_UNAVAILABLE || w.status() == GDSROUTE_STATUS_CUDA_ERROR);
        CHECK(!w.message().empty());
    }
    std::size_t size = 16;
    std::uint64_t offset = 0;
    std::ptrdiff_t bytes = 0;
    auto r = f.value().try_read_async(buf.data(), &size, &offset, &bytes);
    if (r.ok()) {
        CHECK(r.value().try_get().ok());
    } else {
        CHECK(r.status() == GDSROUTE_STATUS_CUDA_UNAVAILABLE || r.status() == GDSROUTE_STATUS_CUDA_ERROR);
    }
    // Refused before anything runs, whatever CUDA: a NULL size pointer; EBADF on an "r" handle.
    EXPECT_ERROR(f.value().try_read_async(buf.data(), nullptr, &offset, &bytes), GDSROUTE_STATUS_NULL_ARGUMENT, -1,
                 "");
    auto ro = gdsroute::File::try_open(path, "r");
    CHECK(ro.ok());
    EXPECT_ERROR(ro.value().try_write_async(buf.data(), buf.size(), 0), GDSROUTE_STATUS_IO_ERROR, EBADF, "");
#if GDSROUTE_HPP_EXCEPTIONS
    EXPECT_THROW((void)ro.value().write_async(buf.data(), buf.size(), 0), GDSROUTE_STATUS_IO_ERROR, EBADF, "");
    EXPECT_THROW((void)ro.value().read_async(buf.data(), &size, nullptr, &bytes), GDSROUTE_STATUS_NULL_ARGUMENT, -1,
                 "");
#endif
}

// Every error path: status, errno and message, through Result and through exceptions.
void test_errors(const std::string &dir) {
    const std::string missing = dir + "/no-such-file";
    EXPECT_ERROR(gdsroute::File::try_open(missing), GDSROUTE_STATUS_OPEN_FAILED, ENOENT, "no-such-file");
    {
        auto r = gdsroute::File::try_open(missing);
        std::ostringstream os;
        os << r.error();
        CHECK(!r.has_value() && !r);
        CHECK(os.str().rfind(std::string(gdsroute::status_str(GDSROUTE_STATUS_OPEN_FAILED)) + " (200, errno 2): ", 0) == 0);
        CHECK(contains(os.str(), "no-such-file"));
    }
    EXPECT_ERROR(gdsroute::File::try_open(dir + "/x", "a"), GDSROUTE_STATUS_INVALID_FLAGS, -1, "");
    EXPECT_ERROR(gdsroute::File::try_open(""), GDSROUTE_STATUS_INVALID_PATH, -1, "");
    EXPECT_ERROR(gdsroute::File::try_open(dir + "/x", "w", 010000), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");
    EXPECT_ERROR(gdsroute::File::try_open(dir + "/x", "w", 0644, static_cast<gdsroute::CompatMode>(7)),
                 GDSROUTE_STATUS_INVALID_ENUM, -1, "");

    const std::string path = dir + "/errors.bin";
    {
        auto w = gdsroute::File::try_open(path, "w");
        CHECK(w.ok());
        std::vector<unsigned char> buf(100, 1);
        CHECK(w.value().try_write(buf.data(), buf.size(), 0).ok());
        // A read on a "w" handle: IO_ERROR with EBADF.
        EXPECT_ERROR(w.value().try_read(buf.data(), 10, 0), GDSROUTE_STATUS_IO_ERROR, EBADF, "");
        EXPECT_ERROR(w.value().try_read(nullptr, 10, 0), GDSROUTE_STATUS_NULL_ARGUMENT, -1, "");
        // A NULL buffer stays NULL whatever the buffer offset: the library refuses it.
        EXPECT_ERROR(w.value().try_write(nullptr, 10, 0, 5), GDSROUTE_STATUS_NULL_ARGUMENT, -1, "");
        EXPECT_ERROR(w.value().try_write_async(nullptr, 10, 0, 5), GDSROUTE_STATUS_NULL_ARGUMENT, -1, "");
    }
    {
        auto rw = gdsroute::File::try_open(path, "r");
        CHECK(rw.ok());
        if (rw.ok()) {
            EXPECT_ERROR(rw.value().try_read(nullptr, 10, 0, 5), GDSROUTE_STATUS_NULL_ARGUMENT, -1, "");
            EXPECT_ERROR(rw.value().try_read_async(nullptr, 10, 0, 5), GDSROUTE_STATUS_NULL_ARGUMENT, -1, "");
        }
    }
    // A NUL byte inside a path, flags or name is refused, not cut short where the C API would stop.
    {
        const std::string cut = path + std::string(1, '\0') + "-tail";
        EXPECT_ERROR(gdsroute::File::try_open(cut), GDSROUTE_STATUS_INVALID_PATH, -1, "NUL byte at offset");
        EXPECT_ERROR(gdsroute::File::try_open(path, std::string("r\0+", 3)), GDSROUTE_STATUS_INVALID_FLAGS, -1,
                     "NUL byte at offset 1");
        EXPECT_ERROR(gdsroute::MmapHandle::try_open(cut), GDSROUTE_STATUS_INVALID_PATH, -1, "NUL byte");
        EXPECT_ERROR(gdsroute::try_get_page_cache_info(cut), GDSROUTE_STATUS_INVALID_PATH, -1, "NUL byte");
        EXPECT_ERROR(gdsroute::try_drop_file_page_cache(cut), GDSROUTE_STATUS_INVALID_PATH, -1, "NUL byte");
        EXPECT_ERROR(gdsroute::try_supports_direct_io(cut), GDSROUTE_STATUS_INVALID_PATH, -1, "NUL byte");
        EXPECT_ERROR(gdsroute::try_diagnose(cut), GDSROUTE_STATUS_INVALID_PATH, -1, "NUL byte");
        EXPECT_ERROR(gdsroute::try_report_add_counter(std::string("cpp\0test", 8), "files", 1),
                     GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "NUL byte at offset 3");
        EXPECT_ERROR(gdsroute::try_report_add_counter("cpp-test", std::string("\0", 1), 1),
                     GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "NUL byte at offset 0");
#if GDSROUTE_HPP_EXCEPTIONS
        EXPECT_THROW(gdsroute::File g(cut), GDSROUTE_STATUS_INVALID_PATH, -1, "NUL byte");
        EXPECT_THROW(gdsroute::MmapHandle m(cut), GDSROUTE_STATUS_INVALID_PATH, -1, "NUL byte");
#endif
    }
    auto f = gdsroute::File::try_open(path, "r");
    CHECK(f.ok());
    std::vector<unsigned char> buf(100);
    EXPECT_ERROR(f.value().try_write(buf.data(), 10, 0), GDSROUTE_STATUS_IO_ERROR, EBADF, "");
    EXPECT_ERROR(f.value().try_pwrite(buf.data(), 10, 0), GDSROUTE_STATUS_IO_ERROR, EBADF, "");
    EXPECT_ERROR(f.value().try_read(buf.data(), SIZE_MAX, 0), GDSROUTE_STATUS_OVERFLOW, -1, "");
    EXPECT_ERROR(f.value().try_pread(buf.data(), 10, UINT64_MAX), GDSROUTE_STATUS_OVERFLOW, -1, "");
    // A closed handle: the library's CLOSED_HANDLE.
    f.value().close();
    CHECK(f.value().closed());
    f.value().close();
    EXPECT_ERROR(f.value().try_read(buf.data(), 10, 0), GDSROUTE_STATUS_CLOSED_HANDLE, -1, "");
    EXPECT_ERROR(f.value().try_nbytes(), GDSROUTE_STATUS_CLOSED_HANDLE, -1, "");
    // An empty Future: NULL_ARGUMENT.
    gdsroute::Future empty;
    CHECK(!empty.valid());
    CHECK(!empty.is_ready());
    EXPECT_ERROR(empty.try_get(), GDSROUTE_STATUS_NULL_ARGUMENT, -1, "");
    EXPECT_ERROR(empty.try_poll(), GDSROUTE_STATUS_NULL_ARGUMENT, -1, "");
    empty.wait(); // returns at once
    // Settings refused, with the setting named.
    EXPECT_ERROR(gdsroute::settings::try_set_num_threads(0), GDSROUTE_STATUS_INVALID_SETTING, -1, "");
    EXPECT_ERROR(gdsroute::settings::try_set_task_size(0), GDSROUTE_STATUS_INVALID_SETTING, -1, "");
    EXPECT_ERROR(gdsroute::settings::try_set_compat_mode(static_cast<gdsroute::CompatMode>(9)),
                 GDSROUTE_STATUS_INVALID_ENUM, -1, "");
    EXPECT_ERROR(gdsroute::settings::try_set_cufile_fd(static_cast<gdsroute::CufileFd>(9)),
                 GDSROUTE_STATUS_INVALID_ENUM, -1, "");
    EXPECT_ERROR(gdsroute::try_get_page_cache_info(missing), GDSROUTE_STATUS_OPEN_FAILED, ENOENT, "");
    EXPECT_ERROR(gdsroute::try_drop_file_page_cache(""), GDSROUTE_STATUS_INVALID_PATH, -1, "");
    EXPECT_ERROR(gdsroute::try_supports_direct_io(missing), GDSROUTE_STATUS_OPEN_FAILED, ENOENT, "");
    EXPECT_ERROR(gdsroute::try_stream_register(nullptr, 0x10), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");
    // Result<void> of a success.
    gdsroute::Result<void> ok = gdsroute::try_stream_deregister(nullptr);
    CHECK(ok.ok() && ok.status() == GDSROUTE_STATUS_OK && ok.message().empty());
    auto value_or = gdsroute::File::try_open(missing).ok() ? 1 : gdsroute::try_supports_direct_io(missing).value_or(false);
    CHECK(value_or == 0);

#if GDSROUTE_HPP_EXCEPTIONS
    EXPECT_THROW(gdsroute::File g(missing), GDSROUTE_STATUS_OPEN_FAILED, ENOENT, "no-such-file");
    EXPECT_THROW(gdsroute::File g(path, "xr"), GDSROUTE_STATUS_INVALID_FLAGS, -1, "");
    EXPECT_THROW(gdsroute::File g(path, "r", 0644, static_cast<gdsroute::CompatMode>(5)),
                 GDSROUTE_STATUS_INVALID_ENUM, -1, "");
    gdsroute::File r(path, "r");
    EXPECT_THROW((void)r.write(buf.data(), 10, 0), GDSROUTE_STATUS_IO_ERROR, EBADF, "");
    EXPECT_THROW((void)r.pwrite(buf.data(), 10, 0), GDSROUTE_STATUS_IO_ERROR, EBADF, "");
    EXPECT_THROW((void)r.read(buf.data(), SIZE_MAX, 0), GDSROUTE_STATUS_OVERFLOW, -1, "");
    EXPECT_THROW((void)r.read(nullptr, 1, 0), GDSROUTE_STATUS_NULL_ARGUMENT, -1, "");
    r.close();
    EXPECT_THROW((void)r.nbytes(), GDSROUTE_STATUS_CLOSED_HANDLE, -1, "");
    EXPECT_THROW((void)r.pread(buf.data(), 1, 0), GDSROUTE_STATUS_CLOSED_HANDLE, -1, "");
    EXPECT_THROW((void)empty.get(), GDSROUTE_STATUS_NULL_ARGUMENT, -1, "");
    EXPECT_THROW(gdsroute::settings::set_task_size(0), GDSROUTE_STATUS_INVALID_SETTING, -1, "task size");
    EXPECT_THROW(gdsroute::defaults::set_thread_pool_nthreads(GDSROUTE_MAX_THREADS + 1),
                 GDSROUTE_STATUS_INVALID_SETTING, -1, "");
    EXPECT_THROW((void)gdsroute::get_page_cache_info(missing), GDSROUTE_STATUS_OPEN_FAILED, ENOENT, "");
    EXPECT_THROW(gdsroute::stream_register(nullptr, 0x10), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");
    // Error is a std::runtime_error whose what() is the library's message, read on this thread.
    try {
        gdsroute::File g(missing);
        CHECK(false);
    } catch (const std::runtime_error &e) {
        char message[4096];
        gdsroute_last_error_message(message, sizeof message);
        CHECK(std::string(e.what()) == message);
    }
#endif
}

// A moved-from File is closed; move-assignment closes the target; closing twice is fine.
void test_moves(const std::string &dir) {
    const std::string path = dir + "/moves.bin";
    std::vector<unsigned char> data(1000, 3);
    {
        auto w = gdsroute::File::try_open(path, "w");
        CHECK(w.ok() && w.value().try_write(data.data(), data.size(), 0).ok());
    }
    auto a = gdsroute::File::try_open(path, "r");
    CHECK(a.ok());
    gdsroute::File b(std::move(a.value()));
    CHECK(a.value().closed());
    CHECK(!b.closed());
    EXPECT_ERROR(a.value().try_read(data.data(), 10, 0), GDSROUTE_STATUS_CLOSED_HANDLE, -1, "moved from");
    CHECK(b.try_read(data.data(), 10, 0).ok());
    a.value().close(); // closing a moved-from handle is fine
    CHECK(a.value().closed());

    auto c = gdsroute::File::try_open(path, "r");
    CHECK(c.ok());
    int old_fd = c.value().try_fd().value_or(-1);
    CHECK(old_fd >= 0);
    c.value() = std::move(b); // closes c's own file first
    CHECK(fcntl(old_fd, F_GETFD) == -1 && errno == EBADF);
    CHECK(b.closed());
    CHECK(!c.value().closed());
    c.value().close();
    c.value().close();
    CHECK(c.value().closed());
    gdsroute::File d;
    CHECK(d.closed());
    d.close();
    EXPECT_ERROR(d.try_fd(), GDSROUTE_STATUS_CLOSED_HANDLE, -1, "");

    // Futures: moving keeps one owner; a moved-to Future gives the result.
    auto e = gdsroute::File::try_open(path, "r");
    CHECK(e.ok());
    std::vector<unsigned char> buf(1000);
    auto op = e.value().try_pread(buf.data(), buf.size(), 0);
    CHECK(op.ok());
    gdsroute::Future f1 = std::move(op.value());
    CHECK(!op.value().valid());
    gdsroute::Future f2;
    f2 = std::move(f1);
    CHECK(!f1.valid() && f2.valid());
    auto got = f2.try_get();
    CHECK(got.ok() && got.value() == 1000);
    gdsroute_op *raw = f2.release();
    CHECK(raw != nullptr && !f2.valid());
    gdsroute_op_free(raw);
    // The handle's stats of that read.
    auto st = e.value().try_stats();
    CHECK(st.ok() && st.value().calls == 1 && st.value().bytes_read == 1000);
    CHECK(e.value().try_stats_reset().ok());
    auto st2 = e.value().try_stats();
    CHECK(st2.ok() && st2.value().calls == 0);
    gdsroute_file *released = e.value().release();
    CHECK(e.value().closed());
    gdsroute::File adopted(released);
    CHECK(!adopted.closed());
}

// settings::Scoped sets a value and restores the previous one; every setting round-trips.
template <class S> void check_guard(typename S::value_type value) {
    auto before = S::get();
    CHECK(before.ok());
    if (!before.ok()) return;
    {
        auto guard = gdsroute::settings::Scoped<S>::try_set(value);
        CHECK(guard.ok());
        auto now = S::get();
        CHECK(now.ok() && now.value() == value);
        CHECK(guard.ok() && guard.value().previous() && *guard.value().previous() == before.value());
    }
    auto after = S::get();
    CHECK(after.ok() && after.value() == before.value());
}

void test_settings() {
    namespace s = gdsroute::settings;
    check_guard<s::CompatModeSetting>(gdsroute::CompatMode::ON);
    check_guard<s::NumThreads>(3);
    check_guard<s::TaskSize>(1 << 16);
    check_guard<s::MinTaskSize>(1 << 17);
    check_guard<s::GdsThreshold>(0);
    check_guard<s::BounceBufferSize>(1 << 20);
    check_guard<s::CufileStats>(false);
    check_guard<s::PageCachePinMax>(12345);
    check_guard<s::CufileFdSetting>(gdsroute::CufileFd::BUFFERED);
    check_guard<s::AutoDirectIoRead>(true);
    check_guard<s::AutoDirectIoWrite>(true);
    check_guard<s::StreamOrdered>(gdsroute::StreamOrderedMode::ON);
    check_guard<s::CufileAsyncNative>(true);
    check_guard<s::PrepareAtOpen>(false);
    check_guard<s::ThreadPoolPerBlockDevice>(true);

    // Nested guards restore in reverse order; an explicit restore happens once; a refused value
    // makes no guard and changes nothing; a moved guard restores once.
    std::size_t task = s::try_task_size().value_or(0);
    {
        auto outer = s::Scoped<s::TaskSize>::try_set(1 << 18);
        {
            auto inner = s::Scoped<s::TaskSize>::try_set(1 << 17);
            CHECK(s::try_task_size().value_or(0) == (1u << 17));
            CHECK(inner.ok() && inner.value().restore().ok());
            CHECK(s::try_task_size().value_or(0) == (1u << 18));
            CHECK(inner.value().restore().ok()); // nothing left to restore
            CHECK(!inner.value().previous());
        }
        CHECK(s::try_task_size().value_or(0) == (1u << 18));
        auto refused = s::Scoped<s::TaskSize>::try_set(0);
        EXPECT_ERROR(refused, GDSROUTE_STATUS_INVALID_SETTING, -1, "");
        CHECK(s::try_task_size().value_or(0) == (1u << 18));
        s::Scoped<s::TaskSize> moved(std::move(outer.value()));
        CHECK(!outer.value().previous());
    }
    CHECK(s::try_task_size().value_or(0) == task);
    CHECK(s::try_thread_pool_nthreads().ok());

#if GDSROUTE_HPP_EXCEPTIONS
    {
        gdsroute::settings::Scoped<gdsroute::settings::GdsThreshold> g(4096);
        CHECK(gdsroute::defaults::gds_threshold() == 4096);
        gdsroute::defaults::set_bounce_buffer_size(gdsroute::defaults::bounce_buffer_size());
        CHECK(gdsroute::defaults::thread_pool_nthreads() == gdsroute::settings::num_threads());
    }
    CHECK(gdsroute::defaults::gds_threshold() != 4096 || task == 0);
    EXPECT_THROW(gdsroute::settings::Scoped<gdsroute::settings::NumThreads> g(0), GDSROUTE_STATUS_INVALID_SETTING,
                 -1, "");
#endif
}

// operator<< prints the text rendering, whose first line is the summary.
void test_stats(const std::string &dir) {
    const std::string path = dir + "/stats.bin";
    const auto data = random_bytes(100000, 4);
    auto f = gdsroute::File::try_open(path, "w+");
    CHECK(f.ok());
    if (!f.ok()) return;
    CHECK(f.value().try_write(data.data(), data.size(), 0).ok());
    std::vector<unsigned char> buf(data.size());
    CHECK(f.value().try_read(buf.data(), buf.size(), 0).ok());
    auto st = f.value().try_stats();
    CHECK(st.ok());
    if (!st.ok()) return;
    std::ostringstream os;
    os << st.value();
    CHECK(os.good());
    auto text = st.value().try_render();
    CHECK(text.ok() && os.str() == text.value());
    auto summary = st.value().try_summary();
    CHECK(summary.ok() && contains(summary.value(), "1 read") && !contains(summary.value(), "\n"));
    CHECK(summary.ok() && os.str().compare(0, summary.value().size(), summary.value()) == 0);
    auto json = st.value().try_render(gdsroute::StatsFormat::JSON);
    CHECK(json.ok() && contains(json.value(), "\"calls\":1") && contains(json.value(), "\"write_calls\":1"));
    auto process = gdsroute::try_stats();
    CHECK(process.ok() && process.value().calls >= 1 && process.value().struct_size == sizeof(gdsroute_stats));
    std::ostringstream pos;
    pos << process.value();
    CHECK(contains(pos.str(), " read") && contains(pos.str(), "calls "));
    // A struct_size below 8 cannot be rendered: operator<< sets failbit.
    gdsroute::Stats bad;
    bad.struct_size = 4;
    std::ostringstream bos;
    bos << bad;
    CHECK(bos.fail());
    EXPECT_ERROR(bad.try_render(), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");
    auto devices = gdsroute::try_device_stats();
    CHECK(devices.ok() && devices.value().empty()); // host memory belongs to no device
    auto dtext = gdsroute::try_render_device_stats(devices.ok() ? devices.value() : std::vector<gdsroute_device_stats>{});
    CHECK(dtext.ok() && !dtext.value().empty());
#if GDSROUTE_HPP_EXCEPTIONS
    std::ostringstream tos;
    tos << f.value().stats();
    CHECK(tos.str() == os.str());
    CHECK(gdsroute::Stats::process().calls >= 1);
    CHECK(contains(gdsroute::stats().render(gdsroute::StatsFormat::JSON), "\"struct_size\""));
    CHECK(gdsroute::render_device_stats(gdsroute::device_stats(), gdsroute::StatsFormat::JSON) == "[]");
#endif
}

// The mapping handle, shaped like KvikIO's MmapHandle.
void test_mapping(const std::string &dir) {
    const std::string path = dir + "/mapping.bin";
    const std::size_t n = 200000;
    const auto data = random_bytes(n, 5);
    {
        auto w = gdsroute::File::try_open(path, "w");
        CHECK(w.ok() && w.value().try_write(data.data(), n, 0).ok());
    }
    auto m = gdsroute::MmapHandle::try_open(path);
    CHECK(m.ok());
    if (!m.ok()) return;
    CHECK(!m.value().closed());
    CHECK(m.value().try_initial_map_size().value_or(0) == n);
    CHECK(m.value().try_initial_map_offset().value_or(1) == 0);
    CHECK(m.value().try_file_size().value_or(0) == n);
    Guarded g(n);
    auto r = m.value().try_read(g.data());
    CHECK(r.ok() && r.value() == n);
    CHECK(std::memcmp(g.data(), data.data(), n) == 0 && g.guards_intact());
    Guarded h(1000);
    r = m.value().try_read(h.data(), 1000, 5000);
    CHECK(r.ok() && r.value() == 1000 && std::memcmp(h.data(), data.data() + 5000, 1000) == 0 && h.guards_intact());
    Guarded p(n - 100);
    auto pr = m.value().try_pread(p.data(), std::nullopt, 100, 4096);
    CHECK(pr.ok());
    if (pr.ok()) {
        auto got = pr.value().try_get();
        CHECK(got.ok() && got.value() == n - 100);
    }
    CHECK(std::memcmp(p.data(), data.data() + 100, n - 100) == 0 && p.guards_intact());
    EXPECT_ERROR(m.value().try_read(h.data(), 1000, n - 10), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");
    EXPECT_ERROR(m.value().try_read(h.data(), std::nullopt, n + 10), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");

    // A range from an offset.
    auto part = gdsroute::MmapHandle::try_open(path, "r", 3000, 1000);
    CHECK(part.ok() && part.value().try_initial_map_size().value_or(0) == 3000 &&
          part.value().try_initial_map_offset().value_or(0) == 1000);
    Guarded q(3000);
    r = part.value().try_read(q.data(), std::nullopt, 1000);
    CHECK(r.ok() && r.value() == 3000 && std::memcmp(q.data(), data.data() + 1000, 3000) == 0 && q.guards_intact());
    EXPECT_ERROR(part.value().try_read(q.data(), 10, 0), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");

    EXPECT_ERROR(gdsroute::MmapHandle::try_open(path, "w"), GDSROUTE_STATUS_INVALID_FLAGS, -1, "only \"r\"");
    EXPECT_ERROR(gdsroute::MmapHandle::try_open(dir + "/none"), GDSROUTE_STATUS_OPEN_FAILED, ENOENT, "");
    EXPECT_ERROR(gdsroute::MmapHandle::try_open(path, "r", 10, n + 1), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");

    // Moves and closing.
    gdsroute::MmapHandle moved(std::move(m.value()));
    CHECK(m.value().closed() && !moved.closed());
    EXPECT_ERROR(m.value().try_read(h.data(), 10, 0), GDSROUTE_STATUS_CLOSED_HANDLE, -1, "moved from");
    moved.close();
    moved.close();
    CHECK(moved.closed());
    EXPECT_ERROR(moved.try_read(h.data(), 10, 0), GDSROUTE_STATUS_CLOSED_HANDLE, -1, "");
    CHECK(moved.try_initial_map_size().value_or(0) == n); // still known after close
#if GDSROUTE_HPP_EXCEPTIONS
    gdsroute::MmapHandle t(path, "r");
    CHECK(t.initial_map_size() == n && t.file_size() == n && t.initial_map_offset() == 0);
    Guarded u(n);
    CHECK(t.read(u.data()) == n && std::memcmp(u.data(), data.data(), n) == 0 && u.guards_intact());
    auto fut = t.pread(u.data(), n);
    CHECK(fut.get() == n);
    EXPECT_THROW(gdsroute::MmapHandle bad(path, "r+"), GDSROUTE_STATUS_INVALID_FLAGS, -1, "");
    EXPECT_THROW((void)t.read(u.data(), 10, n), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");
#endif
}

// Pools: a handle's parallel calls on a pool of the caller's.
void test_pools(const std::string &dir) {
    const std::string path = dir + "/pools.bin";
    const auto data = random_bytes(1 << 20, 6);
    auto f = gdsroute::File::try_open(path, "w+");
    CHECK(f.ok());
    if (!f.ok()) return;
    CHECK(f.value().try_write(data.data(), data.size(), 0).ok());
    auto pool = gdsroute::Pool::try_create(2);
    CHECK(pool.ok() && pool.value().valid());
    CHECK(f.value().try_set_pool(pool.value()).ok());
    auto name = f.value().try_pool_name();
    CHECK(name.ok() && name.value() == "caller");
    {
        gdsroute::Pool gone = std::move(pool.value()); // the handle keeps the pool alive
        CHECK(!pool.value().valid());
    }
    Guarded g(data.size());
    auto pr = f.value().try_pread(g.data(), data.size(), 0);
    CHECK(pr.ok() && pr.value().try_get().value_or(0) == data.size());
    CHECK(std::memcmp(g.data(), data.data(), data.size()) == 0 && g.guards_intact());
    CHECK(f.value().try_reset_pool().ok());
    name = f.value().try_pool_name();
    CHECK(name.ok() && name.value() != "caller");
    // An empty Pool (moved from) is an error, not a way back to the default pool.
    {
        auto again = gdsroute::Pool::try_create(1);
        CHECK(again.ok() && f.value().try_set_pool(again.value()).ok());
    }
    EXPECT_ERROR(f.value().try_set_pool(pool.value()), GDSROUTE_STATUS_NULL_ARGUMENT, -1, "the Pool is empty");
    EXPECT_ERROR(f.value().try_set_pool(gdsroute::Pool()), GDSROUTE_STATUS_NULL_ARGUMENT, -1, "reset_pool()");
    name = f.value().try_pool_name();
    CHECK(name.ok() && name.value() == "caller"); // the error changed nothing
    CHECK(f.value().try_reset_pool().ok());
    EXPECT_ERROR(gdsroute::File().try_set_pool(gdsroute::Pool()), GDSROUTE_STATUS_CLOSED_HANDLE, -1, "");
    EXPECT_ERROR(gdsroute::Pool::try_create(0), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");
    EXPECT_ERROR(gdsroute::Pool::try_create(2, std::vector<std::size_t>{100000}), GDSROUTE_STATUS_INVALID_ARGUMENT,
                 -1, "");
    auto pinned = gdsroute::Pool::try_create(1, std::vector<std::size_t>{0});
    CHECK(pinned.ok() || pinned.status() == GDSROUTE_STATUS_INVALID_ARGUMENT); // CPU 0 may be outside our set
#if GDSROUTE_HPP_EXCEPTIONS
    gdsroute::Pool p(1);
    f.value().set_pool(p);
    CHECK(f.value().pool_name() == "caller");
    f.value().reset_pool();
    EXPECT_THROW(f.value().set_pool(gdsroute::Pool()), GDSROUTE_STATUS_NULL_ARGUMENT, -1, "the Pool is empty");
    EXPECT_THROW(gdsroute::Pool q(GDSROUTE_MAX_THREADS + 1), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");
#endif
}

// Under compat mode ON: registration is a counted no-op, cuFile is not used, the driver's
// properties are not available; its setters check their arguments.
void test_compat_on(const std::string &dir) {
    namespace s = gdsroute::settings;
    auto guard = s::Scoped<s::CompatModeSetting>::try_set(gdsroute::CompatMode::ON);
    CHECK(guard.ok());
    std::vector<unsigned char> buffer(8192);
    auto before = gdsroute::try_stats();
    {
        auto reg = gdsroute::BufferRegistration::try_register(buffer.data(), buffer.size());
        CHECK(reg.ok() && reg.value().active() && reg.value().ptr() == buffer.data());
        CHECK(gdsroute::try_buffer_references(buffer.data()).value_or(0) == 1);
        gdsroute::BufferRegistration moved = std::move(reg.value());
        CHECK(!reg.value().active() && moved.active());
    } // deregistered here
    CHECK(gdsroute::try_buffer_references(buffer.data()).value_or(9) == 0);
    // Host memory, and any pointer in a process without libcuda loaded, is HOST.
    CHECK(gdsroute::try_memory_kind(buffer.data()).value_or(gdsroute::MemoryKind::DEVICE) == gdsroute::MemoryKind::HOST);
    CHECK(gdsroute::try_memory_kind(nullptr).value_or(gdsroute::MemoryKind::DEVICE) == gdsroute::MemoryKind::HOST);
    {
        auto reg = gdsroute::BufferRegistration::try_register(buffer.data(), buffer.size(), 1);
        CHECK(reg.ok() && reg.value().deregister().ok());
        CHECK(!reg.value().active() && reg.value().deregister().ok()); // once
    }
    auto after = gdsroute::try_stats();
    CHECK(before.ok() && after.ok() &&
          after.value().buffer_registrations_skipped == before.value().buffer_registrations_skipped + 2);
    EXPECT_ERROR(gdsroute::BufferRegistration::try_register(buffer.data(), 0), GDSROUTE_STATUS_INVALID_ARGUMENT, -1,
                 "0 bytes");
    EXPECT_ERROR(gdsroute::try_buffer_deregister(buffer.data()), GDSROUTE_STATUS_INVALID_ARGUMENT, -1,
                 "not registered");
    auto mem = gdsroute::MemoryRegistration::try_register(buffer.data());
    CHECK(!mem.ok() && (mem.status() == GDSROUTE_STATUS_CUDA_UNAVAILABLE || mem.status() == GDSROUTE_STATUS_CUDA_ERROR));
    EXPECT_ERROR(gdsroute::MemoryRegistration::try_register(buffer.data(), 8), GDSROUTE_STATUS_INVALID_ARGUMENT, -1,
                 "0x8");

    auto usable = gdsroute::try_cufile_usable();
    CHECK(usable.ok() && usable.value().reason == gdsroute::FallbackReason::COMPAT_ON && !usable.value().usable() &&
          !usable.value().explanation.empty());
    auto preferred = s::try_is_compat_mode_preferred();
    CHECK(preferred.ok() && preferred.value());

    const std::string path = dir + "/compat.bin";
    auto f = gdsroute::File::try_open(path, "w+", 0644, gdsroute::CompatMode::ON);
    CHECK(f.ok());
    if (f.ok()) {
        CHECK(f.value().try_compat_mode().value_or(gdsroute::CompatMode::OFF) == gdsroute::CompatMode::ON);
        auto verdict = f.value().try_cufile_verdict();
        CHECK(verdict.ok() && verdict.value().reason == gdsroute::FallbackReason::COMPAT_ON);
        CHECK(f.value().try_is_compat_mode_preferred().value_or(false));
        CHECK(!f.value().try_cufile_in_use().value_or(true));
    }

    gdsroute::DriverProperties props;
    EXPECT_ERROR(props.try_properties(), GDSROUTE_STATUS_CUFILE_UNAVAILABLE, -1, "");
    CHECK(!props.is_gds_available());
    EXPECT_ERROR(props.try_set_max_device_cache_size(0), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");
    EXPECT_ERROR(props.try_set_max_pinned_memory_size(0), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");
    EXPECT_ERROR(props.try_set_max_direct_io_size(0), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");
    EXPECT_ERROR(gdsroute::try_driver_properties(), GDSROUTE_STATUS_CUFILE_UNAVAILABLE, -1, "");
#if GDSROUTE_HPP_EXCEPTIONS
    {
        gdsroute::BufferRegistration reg(buffer.data(), buffer.size());
        CHECK(gdsroute::buffer_references(buffer.data()) == 1);
    }
    CHECK(gdsroute::memory_kind(buffer.data()) == gdsroute::MemoryKind::HOST);
    gdsroute::buffer_register(buffer.data(), buffer.size());
    gdsroute::buffer_deregister(buffer.data());
    EXPECT_THROW(gdsroute::buffer_deregister(buffer.data()), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");
    EXPECT_THROW(gdsroute::MemoryRegistration reg(buffer.data(), 8), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");
    CHECK(gdsroute::defaults::is_compat_mode_preferred());
    CHECK(gdsroute::cufile_usable().reason == gdsroute::FallbackReason::COMPAT_ON);
    EXPECT_THROW((void)props.get_nvfs_major_version(), GDSROUTE_STATUS_CUFILE_UNAVAILABLE, -1, "");
    EXPECT_THROW(props.set_max_device_cache_size(0), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");
#endif
}

// The page-cache tools, the diagnosis, bounce buffers, the version.
void test_tools(const std::string &dir) {
    const std::string path = dir + "/tools.bin";
    const auto data = random_bytes(1 << 16, 7);
    {
        auto f = gdsroute::File::try_open(path, "w");
        CHECK(f.ok() && f.value().try_write(data.data(), data.size(), 0).ok());
    }
    auto info = gdsroute::try_get_page_cache_info(path);
    CHECK(info.ok() && info.value().second > 0 && info.value().first <= info.value().second);
    CHECK(gdsroute::try_drop_file_page_cache(path).ok());
    CHECK(gdsroute::try_drop_file_page_cache(path, 0, 4096, false).ok());
    CHECK(gdsroute::try_supports_direct_io(path).ok());
    auto freed = gdsroute::try_bounce_buffer_free();
    CHECK(freed.ok());
    auto diag = gdsroute::try_diagnose(path);
    CHECK(diag.ok() && contains(diag.value(), "compat mode"));
    CHECK(std::string(gdsroute::version()) == GDSROUTE_VERSION_STRING);
    CHECK(std::string(gdsroute::status_str(GDSROUTE_STATUS_OK)).size() > 0);
#if GDSROUTE_HPP_EXCEPTIONS
    CHECK(gdsroute::get_page_cache_info(path, 0, 4096).second == 1);
    gdsroute::drop_file_page_cache(path);
    (void)gdsroute::supports_direct_io(path);
    CHECK(!gdsroute::diagnose().empty());
    (void)gdsroute::bounce_buffer_free();
#endif
}

void test_observing(const std::string &dir) {
    const std::string path = dir + "/observed.bin";
    const auto data = random_bytes(3 << 20, 11);
    {
        auto f = gdsroute::File::try_open(path, "w");
        CHECK(f.ok() && f.value().try_write(data.data(), data.size(), 0).ok());
    }
    int calls = 0, tasks = 0;
    std::uint64_t bytes = 0;
    std::string seen_path;
    {
        auto monitor = gdsroute::Monitor::try_add(
            [&](const gdsroute_observation &o) {
                if (o.kind == GDSROUTE_OBSERVATION_KIND_TASK) {
                    tasks++;
                    return;
                }
                calls++;
                bytes = o.bytes;
                seen_path = o.path ? o.path : "";
            },
            true);
        CHECK(monitor.ok() && monitor.value().id() != 0);
        gdsroute::Monitor moved = std::move(monitor.value());
        CHECK(moved.id() != 0 && monitor.value().id() == 0);
        auto f = gdsroute::File::try_open(path, "r");
        std::vector<unsigned char> back(data.size());
        CHECK(f.ok() && f.value().try_read(back.data(), back.size(), 0).ok());
        CHECK(back == data);
        CHECK(calls == 1 && tasks == 1 && bytes == data.size() && seen_path == path);
    }
    {
        auto f = gdsroute::File::try_open(path, "r");
        std::vector<unsigned char> back(16);
        CHECK(f.ok() && f.value().try_read(back.data(), back.size(), 0).ok());
        CHECK(calls == 1); /* the monitor went with its object */
    }
    // A callback that removes its own monitor keeps its captures until it returns.
    {
        std::optional<gdsroute::Monitor> self;
        const std::string captured(200, 'm'); // on the heap: a use after free shows
        std::string seen;
        int runs = 0;
        auto added = gdsroute::Monitor::try_add([&self, &seen, &runs, captured](const gdsroute_observation &) {
            runs++;
            self.reset();
            seen = captured;
        });
        CHECK(added.ok());
        if (added.ok()) self.emplace(std::move(added.value()));
        auto f = gdsroute::File::try_open(path, "r");
        std::vector<unsigned char> back(16);
        CHECK(f.ok() && f.value().try_read(back.data(), back.size(), 0).ok());
        CHECK(f.ok() && f.value().try_read(back.data(), back.size(), 0).ok());
        CHECK(runs == 1 && !self && seen == captured);
    }
    // The same through remove(), the Monitor object staying alive.
    {
        std::optional<gdsroute::Monitor> self;
        const std::string captured(300, 'r');
        std::string seen;
        auto added = gdsroute::Monitor::try_add([&self, &seen, captured](const gdsroute_observation &) {
            self->remove();
            seen = captured;
        });
        CHECK(added.ok());
        if (added.ok()) self.emplace(std::move(added.value()));
        auto f = gdsroute::File::try_open(path, "r");
        std::vector<unsigned char> back(16);
        CHECK(f.ok() && f.value().try_read(back.data(), back.size(), 0).ok());
        CHECK(self && self->id() == 0 && seen == captured);
    }
    auto nothing = gdsroute::Monitor::try_add(nullptr);
    CHECK(!nothing.ok() && nothing.error().status == GDSROUTE_STATUS_NULL_ARGUMENT);
    CHECK(gdsroute::try_report_add_counter("cpp-test", "files", 2).ok());
    CHECK(!gdsroute::try_report_add_counter("", "files", 1).ok());
    auto text = gdsroute::try_report();
    CHECK(text.ok() && contains(text.value(), "gdsroute report, process ") && contains(text.value(), "cpp-test: files=2"));
    auto json = gdsroute::try_report(true);
    CHECK(json.ok() && json.value().front() == '{' && contains(json.value(), "\"cpp-test\":{\"files\":2}"));
#if GDSROUTE_HPP_EXCEPTIONS
    {
        int thrown = 0;
        gdsroute::Monitor m = gdsroute::Monitor::add([&](const gdsroute_observation &) {
            thrown++;
            throw std::runtime_error("a monitor's bug: caught in the trampoline");
        });
        auto f = gdsroute::File::try_open(path, "r");
        std::vector<unsigned char> back(16);
        CHECK(f.ok() && f.value().try_read(back.data(), back.size(), 0).ok());
        CHECK(thrown == 1);
    }
    CHECK(contains(gdsroute::report(), "gdsroute report"));
    gdsroute::report_add_counter("cpp-test", "files", 1);
#endif
}

} // namespace

// Batches: a read and a write through BatchHandle, every byte within guards; a closed handle's
// entry fails on its own; the in-flight limit; KvikIO's names with exceptions.
void test_batches(const std::string &dir) {
    const std::string path = dir + "/batch.bin";
    const auto data = random_bytes((1 << 20) + 5, 9);
    auto f = gdsroute::File::try_open(path, "w+");
    CHECK(f.ok());
    if (!f.ok()) return;
    CHECK(f.value().try_write(data.data(), data.size(), 0).ok());
    auto closed = gdsroute::File::try_open(path, "r");
    CHECK(closed.ok());
    if (!closed.ok()) return;
    closed.value().close();
    auto b = gdsroute::BatchHandle::try_create(3);
    CHECK(b.ok() && !b.value().closed());
    if (!b.ok()) return;
    Guarded g(data.size());
    const std::vector<std::uint8_t> piece(data.begin(), data.begin() + 1000);
    std::vector<gdsroute::BatchOp> ops = {
        {f.value(), g.data(), 0, 0, data.size(), gdsroute::BatchOpcode::READ, 1},
        {f.value(), const_cast<std::uint8_t *>(piece.data()), data.size(), 0, piece.size(), gdsroute::BatchOpcode::WRITE, 2},
        {closed.value(), g.data(), 0, 0, 10, gdsroute::BatchOpcode::READ, 3},
    };
    CHECK(b.value().try_submit(ops).ok());
    EXPECT_ERROR(b.value().try_submit(ops), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "at most 3");
    std::size_t seen = 0;
    while (seen < 3) {
        auto events = b.value().try_status(1, 3);
        CHECK(events.ok());
        if (!events.ok() || events.value().empty()) break;
        for (const gdsroute::BatchEvent &e : events.value()) {
            seen++;
            if (e.cookie == 1) CHECK(e.status == GDSROUTE_STATUS_OK && e.bytes == data.size());
            else if (e.cookie == 2) CHECK(e.status == GDSROUTE_STATUS_OK && e.bytes == piece.size());
            else CHECK(e.cookie == 3 && e.status == GDSROUTE_STATUS_CLOSED_HANDLE && e.bytes == 0);
        }
    }
    CHECK(seen == 3);
    CHECK(std::memcmp(g.data(), data.data(), data.size()) == 0 && g.guards_intact());
    std::vector<std::uint8_t> tail(piece.size());
    CHECK(f.value().try_read(tail.data(), tail.size(), data.size()).value_or(0) == tail.size() && tail == piece);
    auto none = b.value().try_status(0, 3, 0);
    CHECK(none.ok() && none.value().empty());
    CHECK(b.value().try_cancel().value_or(99) == 0);
    b.value().close();
    CHECK(b.value().closed());
    b.value().close(); // idempotent
    EXPECT_ERROR(gdsroute::BatchHandle::try_create(0), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");
#if GDSROUTE_HPP_EXCEPTIONS
    gdsroute::BatchHandle kb(1);
    kb.submit({{f.value(), g.data(), 0, 0, 100, gdsroute::BatchOpcode::READ}});
    auto ev = kb.status(1, 1);
    CHECK(ev.size() == 1 && ev[0].status == GDSROUTE_STATUS_OK && ev[0].bytes == 100);
    CHECK(kb.cancel() == 0);
    EXPECT_THROW(gdsroute::BatchHandle kz(0), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");
#endif
}

// What a file driver needs: exclusive creation, a handle from a descriptor, truncation, locks.
void test_file_driver_calls(const std::string &dir) {
    const std::string path = dir + "/driver.bin";
    const auto data = random_bytes(300000, 30);
    {
        auto created = gdsroute::File::try_open(path, "x+", 0600);
        CHECK(created.ok());
        if (!created.ok()) return;
        auto w = created.value().try_write(data.data(), data.size(), 0);
        CHECK(w.ok() && w.value() == data.size());
    }
    EXPECT_ERROR(gdsroute::File::try_open(path, "x"), GDSROUTE_STATUS_OPEN_FAILED, EEXIST, "driver.bin");
    EXPECT_ERROR(gdsroute::File::try_open(path, "x+"), GDSROUTE_STATUS_OPEN_FAILED, EEXIST, "driver.bin");

    // From a descriptor: the caller keeps its own; every byte through the handle.
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    {
        auto f = gdsroute::File::try_open_fd(fd);
        CHECK(f.ok());
        if (!f.ok()) return;
        auto flags = f.value().try_fd_open_flags();
        CHECK(flags.ok() && (flags.value() & O_ACCMODE) == O_RDWR);
        auto hfd = f.value().try_fd();
        CHECK(hfd.ok() && hfd.value() != fd);
        Guarded g(data.size());
        auto r = f.value().try_read(g.data(), data.size(), 0);
        CHECK(r.ok() && r.value() == data.size());
        CHECK(std::memcmp(g.data(), data.data(), data.size()) == 0 && g.guards_intact());

        // Truncation: the size follows, reads stop at the new end.
        CHECK(f.value().try_truncate(1000).ok());
        auto n = f.value().try_nbytes();
        CHECK(n.ok() && n.value() == 1000);
        Guarded h(4096);
        auto short_read = f.value().try_read(h.data(), 4096, 0);
        CHECK(short_read.ok() && short_read.value() == 1000);
        CHECK(std::memcmp(h.data(), data.data(), 1000) == 0 && h.guards_intact());
        EXPECT_ERROR(f.value().try_truncate(UINT64_MAX), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "driver.bin");

        // Locks: a second handle conflicts without waiting; after the unlock it gets it.
        auto other = gdsroute::File::try_open(path, "r");
        CHECK(other.ok());
        CHECK(f.value().try_lock(true, false).ok());
        EXPECT_ERROR(other.value().try_lock(true, false), GDSROUTE_STATUS_IO_ERROR, EWOULDBLOCK, "flock");
        EXPECT_ERROR(other.value().try_lock(false, false), GDSROUTE_STATUS_IO_ERROR, EWOULDBLOCK, "flock");
        CHECK(f.value().try_unlock().ok());
        CHECK(other.value().try_lock(false, false).ok());
        CHECK(f.value().try_lock(false, false).ok()); // shared with shared
        CHECK(other.value().try_unlock().ok());
        CHECK(f.value().try_unlock().ok());
        EXPECT_ERROR(other.value().try_truncate(0), GDSROUTE_STATUS_IO_ERROR, EBADF, "read-only");
    }
    CHECK(fcntl(fd, F_GETFD) >= 0); // the handle closed its duplicate only
    EXPECT_ERROR(gdsroute::File::try_open_fd(-1), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "fd -1");
    EXPECT_ERROR(gdsroute::File::try_open_fd(1 << 30), GDSROUTE_STATUS_OPEN_FAILED, EBADF, "");
    EXPECT_ERROR(gdsroute::File::try_open_fd(fd, static_cast<gdsroute::CompatMode>(7)), GDSROUTE_STATUS_INVALID_ENUM,
                 -1, "");
    auto on = gdsroute::File::try_open_fd(fd, gdsroute::CompatMode::ON);
    CHECK(on.ok() && on.value().try_compat_mode().ok() && on.value().try_compat_mode().value() == gdsroute::CompatMode::ON);
    gdsroute::File empty;
    EXPECT_ERROR(empty.try_truncate(0), GDSROUTE_STATUS_CLOSED_HANDLE, -1, "");
    EXPECT_ERROR(empty.try_lock(), GDSROUTE_STATUS_CLOSED_HANDLE, -1, "");
    EXPECT_ERROR(empty.try_unlock(), GDSROUTE_STATUS_CLOSED_HANDLE, -1, "");

#if GDSROUTE_HPP_EXCEPTIONS
    {
        gdsroute::File a = gdsroute::File::open_fd(fd);
        gdsroute::File b(path, "r");
        a.truncate(200);
        CHECK(a.nbytes() == 200 && b.nbytes() == 200);
        a.lock();
        EXPECT_THROW(b.lock(true, false), GDSROUTE_STATUS_IO_ERROR, EWOULDBLOCK, "flock");
        a.unlock();
        b.lock(false, true);
        b.unlock();
        EXPECT_THROW(b.truncate(0), GDSROUTE_STATUS_IO_ERROR, EBADF, "");
        EXPECT_THROW((void)gdsroute::File::open_fd(-1), GDSROUTE_STATUS_INVALID_ARGUMENT, -1, "");
        EXPECT_THROW(gdsroute::File g(path, "x"), GDSROUTE_STATUS_OPEN_FAILED, EEXIST, "");
        a.close();
        EXPECT_THROW(a.lock(), GDSROUTE_STATUS_CLOSED_HANDLE, -1, "");
        EXPECT_THROW(a.truncate(0), GDSROUTE_STATUS_CLOSED_HANDLE, -1, "");
    }
#endif
    ::close(fd);
}

int main(int argc, char **argv) {
    if (argc > 1 && std::string(argv[1]) == "abort") {
        // value() of a failed Result: an Error with exceptions, else the error on stderr and abort().
        auto r = gdsroute::File::try_open("/nonexistent/gdsroute-cpp-abort");
#if GDSROUTE_HPP_EXCEPTIONS
        try {
            (void)r.value();
        } catch (const gdsroute::Error &e) {
            std::printf("threw: %s\n", e.what());
            return 0;
        }
        return 1;
#else
        (void)r.value();
        return 0; // not reached
#endif
    }
    const std::string dir = temp_dir();
    test_io(dir);
    test_async(dir);
    test_errors(dir);
    test_moves(dir);
    test_settings();
    test_stats(dir);
    test_mapping(dir);
    test_pools(dir);
    test_compat_on(dir);
    test_tools(dir);
    test_observing(dir);
    test_batches(dir);
    test_file_driver_calls(dir);
    std::string cmd = "rm -rf '" + dir + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
    std::printf("exceptions %s, C++ %ld\n", GDSROUTE_HPP_EXCEPTIONS ? "on" : "off", static_cast<long>(__cplusplus));
    return check_summary();
}
