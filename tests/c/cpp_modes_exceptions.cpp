// One program, two modes: this translation unit is built with exceptions and
// cpp_modes_no_exceptions.cpp without, both at -O0 so that neither inlines the header's calls.
// Each mode must keep its own behaviour: here a failed value() throws gdsroute::Error and an
// exception thrown by a monitor's callback is caught in the trampoline.
#include <gdsroute.hpp>

#include "check.h"

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#if !GDSROUTE_HPP_EXCEPTIONS
#error "cpp_modes_exceptions.cpp must be built with exceptions"
#endif

int no_exceptions_side(const std::string &path);

int main() {
    // The program itself: a file every Linux system can read.
    const std::string path = "/proc/self/exe";
    CHECK(no_exceptions_side(path) == 0);

    std::string caught;
    try {
        gdsroute::Result<gdsroute::File> missing = gdsroute::File::try_open("/nonexistent/gdsroute-modes", "r");
        (void)missing.value();
    } catch (const gdsroute::Error &e) {
        caught = e.what();
    }
    CHECK(caught.find("/nonexistent/gdsroute-modes") != std::string::npos);

    gdsroute::File closed;
    std::vector<char> buf(16);
    int status = 0;
    try {
        gdsroute::Result<std::size_t> got = closed.try_read(buf.data(), buf.size(), 0);
        (void)got.value();
    } catch (const gdsroute::Error &e) {
        status = static_cast<int>(e.status());
    }
    CHECK(status == GDSROUTE_STATUS_CLOSED_HANDLE);

    status = 0;
    try {
        gdsroute::Result<void> synced = closed.try_sync();
        synced.value();
    } catch (const gdsroute::Error &e) {
        status = static_cast<int>(e.status());
    }
    CHECK(status == GDSROUTE_STATUS_CLOSED_HANDLE);

    int thrown = 0;
    {
        auto monitor = gdsroute::Monitor::try_add([&thrown](const gdsroute_observation &) {
            thrown++;
            throw std::runtime_error("a callback's exception stays in the trampoline");
        });
        CHECK(monitor.ok());
        gdsroute::Result<gdsroute::File> file = gdsroute::File::try_open(path, "r");
        CHECK(file.ok() && file.value().try_read(buf.data(), buf.size(), 0).ok());
    }
    CHECK(thrown == 1);
    return check_summary();
}
