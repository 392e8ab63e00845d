#include <gdsroute.hpp>

#include <cstdio>
#include <sstream>
#include <string>

std::string gdsroute_tu_a_summary();

int main() {
    std::string a = gdsroute_tu_a_summary();
    gdsroute::Result<gdsroute::File> file = gdsroute::File::try_open("/proc/self/exe");
    auto guard = gdsroute::settings::Scoped<gdsroute::settings::TaskSize>::try_set(1 << 17);
    char buf[64];
    auto op = file.ok() ? file.value().try_pread(buf, sizeof buf, 0) : gdsroute::Result<gdsroute::Future>(file.error());
    std::ostringstream os;
    if (file.ok()) os << file.value().try_stats().value();
    bool ok = a.find("1 read") == std::string::npos && a.find("2 reads") != std::string::npos && guard.ok() &&
              op.ok() && op.value().try_get().value_or(0) == sizeof buf;
    std::printf("%s\n", ok ? "1 passed, 0 failed" : "0 passed, 1 failed");
    if (!ok) std::fprintf(stderr, "tu a: %s\n", a.c_str());
    return ok ? 0 : 1;
}
