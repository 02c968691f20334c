#include "tools/hcaemu/cli.hpp"

#include <charconv>
#include <cstdio>

namespace hcaemu::tools {

std::optional<uint64_t> parse_uint(const std::string& s, uint64_t lo, uint64_t hi) {
    const bool hex = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    const char* b = s.data() + (hex ? 2 : 0);
    const char* e = s.data() + s.size();
    uint64_t v = 0;
    auto r = std::from_chars(b, e, v, hex ? 16 : 10);
    if (b == e || r.ec != std::errc() || r.ptr != e || v < lo || v > hi) return std::nullopt;
    return v;
}

int usage_error(const char* sub, const std::string& msg) {
    std::fprintf(stderr, "hcaemu %s: %s\nTry 'hcaemu %s --help'.\n", sub, msg.c_str(), sub);
    return kExitUsage;
}

const char* const kDeviceHelp =
    "the device:\n"
    "  --device SPEC       unix:PATH: the HCA of a running hcaemud listening on PATH (it owns the\n"
    "                      port: no attach options then); local (default): an HCA in this process,\n"
    "                      attached with the options below\n";

int take_device_option(int argc, char** argv, int& i, std::string& device, std::string& err) {
    const std::string a = argv[i];
    if (a.rfind("--device=", 0) == 0) {
        device = a.substr(9);
        return 1;
    }
    if (a != "--device") return 0;
    if (i + 1 >= argc) {
        err = "--device needs a value (unix:PATH or local)";
        return -1;
    }
    device = argv[++i];
    return 1;
}

std::string device_conflict(const std::string& device, const std::string& first_attach) {
    if (!device.empty() && device != "local" && device.rfind("unix:", 0) != 0)
        return "--device: unknown device '" + device + "': use unix:PATH (a running hcaemud) or local";
    if (device == "unix:") return "--device: 'unix:' names no socket: use unix:PATH";
    if (device.rfind("unix:", 0) == 0 && !first_attach.empty())
        return first_attach + ": the daemon behind --device " + device +
               " owns the port; attach options go with an in-process HCA only";
    return "";
}

}  // namespace hcaemu::tools
