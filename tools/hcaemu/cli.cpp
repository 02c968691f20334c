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

}  // namespace hcaemu::tools
