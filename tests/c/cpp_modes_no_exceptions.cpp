// Built with -fno-exceptions and linked, before cpp_modes_exceptions.cpp, into one program: it
// uses the same inline calls and template instantiations (Result<T>::value(), the monitor's
// trampoline) as the exceptions side, so the linker would keep this side's copies if the two
// modes' definitions shared names, and a failed value() there would abort instead of throwing.
#include <gdsroute.hpp>

#include <string>
#include <vector>

#if GDSROUTE_HPP_EXCEPTIONS
#error "cpp_modes_no_exceptions.cpp must be built with -fno-exceptions"
#endif

int no_exceptions_side(const std::string &path);
int no_exceptions_side(const std::string &path) {
    int observed = 0;
    auto monitor = gdsroute::Monitor::try_add([&observed](const gdsroute_observation &) { observed++; });
    if (!monitor.ok()) return 1;
    gdsroute::Result<gdsroute::File> file = gdsroute::File::try_open(path, "r");
    if (!file.ok()) return 2;
    std::vector<char> buf(16);
    gdsroute::Result<std::size_t> got = file.value().try_read(buf.data(), buf.size(), 0);
    if (!got.ok() || got.value() != buf.size()) return 3;
    gdsroute::Result<void> synced = file.value().try_sync();
    synced.value();
    gdsroute::Result<std::uint64_t> size = file.value().try_nbytes();
    if (!size.ok() || size.value() == 0) return 4;
    return observed == 1 ? 0 : 5;
}
