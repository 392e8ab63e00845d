// Two translation units include gdsroute.hpp and use the same inline functions and template
// instantiations (Result<File>, Scoped<TaskSize>, Future, Stats' operator<<); linked together,
// nothing may be defined twice.
#include <gdsroute.hpp>

#include <sstream>
#include <string>

std::string gdsroute_tu_a_summary();
std::string gdsroute_tu_a_summary() {
    gdsroute::Result<gdsroute::File> file = gdsroute::File::try_open("/proc/self/exe");
    char buf[64];
    if (!file.ok() || !file.value().try_read(buf, sizeof buf, 0).ok()) return "open failed";
    auto guard = gdsroute::settings::Scoped<gdsroute::settings::TaskSize>::try_set(1 << 16);
    auto op = file.value().try_pread(buf, sizeof buf, 0);
    if (!guard.ok() || !op.ok() || op.value().try_get().value_or(0) != sizeof buf) return "pread failed";
    std::ostringstream os;
    os << file.value().try_stats().value();
    return os.str();
}
