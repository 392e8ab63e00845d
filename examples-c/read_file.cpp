// read_file_cpp PATH: the C++17 counterpart of read_file.c, on the C++ API (gdsroute.hpp):
// gdsroute::File owns the handle, the Future of pread owns the operation, errors are
// gdsroute::Error exceptions carrying the status, errno and the library's message. Prints the
// counters as JSON.
#include <gdsroute.hpp>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

std::uint64_t fnv1a(const unsigned char *data, std::size_t len) {
    std::uint64_t hash = 0xcbf29ce484222325ULL;
    for (std::size_t i = 0; i < len; i++) {
        hash ^= data[i];
        hash *= 0x100000001b3ULL;
    }
    return hash;
}

void report(const char *how, std::size_t bytes, std::chrono::duration<double> elapsed, std::uint64_t sum) {
    double s = elapsed.count();
    std::printf("%-6s %zu bytes in %.3f s (%.2f GB/s), fnv1a %016" PRIx64 "\n", how, bytes, s,
                s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0.0, sum);
}

int run(const char *path) {
    using clock = std::chrono::steady_clock;
    gdsroute::File file(path); // KvikIO: kvikio::FileHandle file(path, "r");
    const std::uint64_t nbytes = file.nbytes();
    if (nbytes > SIZE_MAX - 1) {
        std::fprintf(stderr, "read_file_cpp: %s is too large for this address space\n", path);
        return 1;
    }
    const std::size_t size = static_cast<std::size_t>(nbytes);
    // At least one byte: an empty vector's data() is NULL, which the library refuses as a buffer.
    std::vector<unsigned char> buf(size > 0 ? size : 1);

    auto t0 = clock::now();
    std::size_t got = file.pread(buf.data(), size).get(); // the Future waits and is freed here
    auto t1 = clock::now();
    std::uint64_t parallel_sum = fnv1a(buf.data(), got);
    report("pread", got, t1 - t0, parallel_sum);

    t0 = clock::now();
    std::size_t got_sync = file.read(buf.data(), size);
    t1 = clock::now();
    std::uint64_t sync_sum = fnv1a(buf.data(), got_sync);
    report("read", got_sync, t1 - t0, sync_sum);
    if (got != size || got_sync != size || parallel_sum != sync_sum) {
        std::fprintf(stderr, "read_file_cpp: the two reads disagree\n");
        return 1;
    }
    std::printf("process counters: %s\n", gdsroute::stats().render(gdsroute::StatsFormat::JSON).c_str());
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s PATH\n", argv[0]);
        return 2;
    }
    try {
        return run(argv[1]);
    } catch (const gdsroute::Error &e) {
        std::fprintf(stderr, "read_file_cpp: %s (%s, errno %d)\n", e.what(), e.status_name(),
                     static_cast<int>(e.os_errno()));
        return 1;
    }
}
