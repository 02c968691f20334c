// hcaemu exec: runs an unmodified verbs program on hcaemu: hcaemu's libibverbs.so.1 first in
// LD_LIBRARY_PATH and the device in HCAEMU_DEVICE (and a local HCA's attach options in HCAEMU_*),
// then execvp (docs/verbs.md).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "tools/attach/attach.hpp"
#include "tools/hcaemu/cli.hpp"

namespace hcaemu::tools {

namespace {

constexpr const char* kExecHelp =
    "usage: hcaemu exec [--device SPEC] [attach options] -- PROGRAM [ARGS...]\n"
    "\n"
    "Runs PROGRAM, an unmodified RDMA program (ibv_rc_pingpong, perftest, your own), on hcaemu:\n"
    "hcaemu's libibverbs.so.1 and librdmacm.so.1 come first in LD_LIBRARY_PATH and the device is hcaemu0.\n"
    "  --device SPEC       unix:PATH: the HCA of the hcaemud listening on PATH; local (default): an\n"
    "                      HCA inside PROGRAM, attached with the options below (then --ip is required)\n";

// The variable each attach option becomes (docs/verbs.md).
const char* variable_of(const std::string& opt) {
    static const std::pair<const char*, const char*> kVars[] = {
        {"--eal", "HCAEMU_EAL"}, {"--dpdk-port", "HCAEMU_DPDK_PORT"}, {"--ip", "HCAEMU_IP"},
        {"--mac", "HCAEMU_MAC"}, {"--pcap", "HCAEMU_PCAP"},           {"--link-mtu", "HCAEMU_LINK_MTU"},
        {"--inject", "HCAEMU_INJECT"}, {"--dcqcn", "HCAEMU_DCQCN"}};
    for (const auto& [o, v] : kVars)
        if (opt == o) return v;
    return nullptr;
}

// The build tree's libraries beside this binary (build/tools/verbs, and build/tools/rdmacm for
// librdmacm.so.1), else the installed directory that holds both.
std::string verbs_libdir() {
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        std::string dir(self, size_t(n));
        dir.resize(dir.rfind('/'));
        const std::string build = dir + "/verbs";
        if (::access((build + "/libibverbs.so.1").c_str(), R_OK) == 0) {
            const std::string cm = dir + "/rdmacm";
            return ::access((cm + "/librdmacm.so.1").c_str(), R_OK) == 0 ? build + ":" + cm : build;
        }
    }
    return HCAEMU_VERBS_INSTALL_DIR;
}

}  // namespace

int cmd_exec(int argc, char** argv) {
    std::string device = "local", err, first_attach;
    AttachOptions o;
    std::vector<std::pair<std::string, std::string>> vars;
    int i = 1;
    for (; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--") break;
        if (a == "-h" || a == "--help") {
            std::printf("%s\n%s", kExecHelp, kAttachHelp);
            return kExitOk;
        }
        if (const int r = take_device_option(argc, argv, i, device, err); r != 0) {
            if (r < 0) return usage_error("exec", err);
            continue;
        }
        const size_t eq = a.find('=');
        const std::string name = a.substr(0, eq);
        if (const int r = take_attach_option(argc, argv, i, o, err); r != 0) {
            if (r < 0) return usage_error("exec", err);
            if (first_attach.empty()) first_attach = name;
            const std::string v = eq == std::string::npos ? std::string(argv[i]) : a.substr(eq + 1);
            if (name == "--inject")  // repeatable: one variable, rules separated by ';'
                if (auto it = std::find_if(vars.begin(), vars.end(), [](auto& kv) { return kv.first == "HCAEMU_INJECT"; });
                    it != vars.end()) {
                    it->second += "; " + v;
                    continue;
                }
            if (name == "--dcqcn")  // repeatable: one variable, settings separated by ','
                if (auto it = std::find_if(vars.begin(), vars.end(), [](auto& kv) { return kv.first == "HCAEMU_DCQCN"; });
                    it != vars.end()) {
                    it->second += "," + v;
                    continue;
                }
            vars.emplace_back(variable_of(name), v);
            continue;
        }
        return usage_error("exec", "unknown option '" + a + "' (the program and its arguments go after --)");
    }
    if (i + 1 >= argc) return usage_error("exec", "no program: hcaemu exec [OPTIONS] -- PROGRAM [ARGS...]");
    if (const std::string c = device_conflict(device, first_attach); !c.empty()) return usage_error("exec", c);
    if ((device.empty() || device == "local") && o.ip.empty())
        return usage_error("exec", "--ip ADDR/LEN is required for a local HCA (or --device unix:PATH)");

    const std::string lib = verbs_libdir();
    const char* old = std::getenv("LD_LIBRARY_PATH");
    ::setenv("LD_LIBRARY_PATH", (old && *old ? lib + ":" + old : lib).c_str(), 1);
    ::setenv("HCAEMU_DEVICE", device.empty() ? "local" : device.c_str(), 1);
    for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
    ::execvp(argv[i + 1], argv + i + 1);
    std::fprintf(stderr, "hcaemu exec: cannot run '%s': %s\n", argv[i + 1], std::strerror(errno));
    return errno == ENOENT ? 127 : 126;  // as a shell says it
}

}  // namespace hcaemu::tools
