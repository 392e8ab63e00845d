// read_file_cpp PATH: the C++17 counterpart of read_file.c. Small RAII wrappers own the handle,
// the operation and the buffer; errors become exceptions carrying the library's last message.
// Prints the counters as JSON.
#include <gdsroute.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct FileDeleter {
    void operator()(gdsroute_file *f) const noexcept { gdsroute_file_free(f); }
};
struct OpDeleter {
    void operator()(gdsroute_op *op) const noexcept { gdsroute_op_free(op); }
};
using File = std::unique_ptr<gdsroute_file, FileDeleter>;
using Op = std::unique_ptr<gdsroute_op, OpDeleter>;

class Error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

std::string last_error() {
    std::string message(gdsroute_last_error_message(nullptr, 0), '\0');
    gdsroute_last_error_message(message.data(), message.size() + 1);
    return message;
}

void check(gdsroute_status st, const char *what) {
    if (st != GDSROUTE_STATUS_OK) {
        throw Error(std::string(what) + " failed: " + gdsroute_status_str(st) + " (" +
                    std::to_string(static_cast<unsigned>(st)) + "): " + last_error());
    }
}

File open_file(const char *path) {
    gdsroute_file *raw = nullptr;
    check(gdsroute_file_open(path, "r", 0, &raw), "gdsroute_file_open");
    return File(raw);
}

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

std::string stats_json() {
    gdsroute_stats stats{};
    stats.struct_size = sizeof stats;
    check(gdsroute_stats_get(&stats), "gdsroute_stats_get");
    std::size_t len = 0;
    check(gdsroute_stats_render(&stats, GDSROUTE_STATS_FORMAT_JSON, nullptr, 0, &len), "gdsroute_stats_render");
    std::string json(len, '\0');
    check(gdsroute_stats_render(&stats, GDSROUTE_STATS_FORMAT_JSON, json.data(), len + 1, &len),
          "gdsroute_stats_render");
    return json;
}

int run(const char *path) {
    using clock = std::chrono::steady_clock;
    File file = open_file(path);
    std::uint64_t size = 0;
    check(gdsroute_file_size(file.get(), &size), "gdsroute_file_size");
    std::vector<unsigned char> buf(static_cast<std::size_t>(size));

    auto t0 = clock::now();
    std::size_t got = 0;
    {
        gdsroute_op *raw = nullptr;
        check(gdsroute_file_pread(file.get(), buf.data(), buf.size(), 0, &raw), "gdsroute_file_pread");
        Op op(raw); // declared after buf: freed (and so waited for) before buf is released
        check(gdsroute_op_wait(op.get(), &got), "gdsroute_op_wait");
    }
    auto t1 = clock::now();
    std::uint64_t parallel_sum = fnv1a(buf.data(), got);
    report("pread", got, t1 - t0, parallel_sum);

    t0 = clock::now();
    std::size_t got_sync = 0;
    check(gdsroute_file_read(file.get(), buf.data(), buf.size(), 0, &got_sync), "gdsroute_file_read");
    t1 = clock::now();
    std::uint64_t sync_sum = fnv1a(buf.data(), got_sync);
    report("read", got_sync, t1 - t0, sync_sum);
    if (got != size || got_sync != size || parallel_sum != sync_sum) {
        throw Error("the two reads disagree");
    }
    std::printf("process counters: %s\n", stats_json().c_str());
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
    } catch (const std::exception &e) {
        std::fprintf(stderr, "read_file_cpp: %s\n", e.what());
        return 1;
    }
}
