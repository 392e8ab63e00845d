// consumer_cxx [PREFIX]: the installed C++ API (gdsroute.hpp, C++17) in a user's program: the
// version, a File read of this executable through both forms, a settings guard, the counters
// printed with <<; and where libgdsroute was loaded from (PREFIX for a shared link, nowhere for
// the static one), as consumer.c checks.
#include <gdsroute.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace {

bool loaded_as_expected(const std::string &prefix) {
    std::ifstream maps("/proc/self/maps");
    if (!maps) return true; // nothing to check on this system
    bool found = false, from_prefix = false;
    for (std::string line; std::getline(maps, line);) {
        std::size_t slash = line.find('/');
        if (slash != std::string::npos && line.find("libgdsroute.so", slash) != std::string::npos) {
            found = true;
            from_prefix |= !prefix.empty() && line.compare(slash, prefix.size(), prefix) == 0;
        }
    }
#ifdef CONSUMER_STATIC
    (void)from_prefix;
    return !found;
#else
    return found && (prefix.empty() || from_prefix);
#endif
}

int run(const std::string &prefix) {
    if (std::strcmp(gdsroute::version(), GDSROUTE_VERSION_STRING) != 0) {
        std::fprintf(stderr, "header %s, library %s\n", GDSROUTE_VERSION_STRING, gdsroute::version());
        return 1;
    }
    auto file = gdsroute::File::try_open("/proc/self/exe");
    if (!file.ok()) {
        std::fprintf(stderr, "open: %s\n", file.message().c_str());
        return 1;
    }
    auto guard = gdsroute::settings::Scoped<gdsroute::settings::TaskSize>::try_set(1 << 16);
    char buf[64];
    auto op = file.value().try_pread(buf, sizeof buf, 0);
    bool ok = guard.ok() && op.ok() && op.value().try_get().value_or(0) == sizeof buf &&
              std::memcmp(buf, "\177ELF", 4) == 0;
#if GDSROUTE_HPP_EXCEPTIONS
    try {
        gdsroute::File again("/proc/self/exe");
        ok = ok && again.read(buf, 4, 0) == 4 && std::memcmp(buf, "\177ELF", 4) == 0;
        gdsroute::File missing("/nonexistent/gdsroute-consumer");
        ok = false;
    } catch (const gdsroute::Error &e) {
        ok = ok && e.status() == GDSROUTE_STATUS_OPEN_FAILED && e.os_errno() == 2;
    }
#endif
    std::ostringstream stats;
    stats << file.value().try_stats().value();
    ok = ok && stats.str().find("1 read") != std::string::npos;
    if (!ok) {
        std::fprintf(stderr, "read failed; counters:\n%s\n", stats.str().c_str());
        return 1;
    }
    if (!loaded_as_expected(prefix)) {
        std::fprintf(stderr, "libgdsroute was not loaded as expected (prefix %s)\n", prefix.c_str());
        return 1;
    }
    std::printf("consumer ok: gdsroute %s (C++ API)\n", gdsroute::version());
    return 0;
}

} // namespace

int main(int argc, char **argv) { return run(argc > 1 ? argv[1] : ""); }
