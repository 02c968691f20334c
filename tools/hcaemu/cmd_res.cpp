// hcaemu res show KIND and hcaemu stat: what a running hcaemud holds and counts, in the manner of
// iproute2's `rdma res show` and `rdma statistic`: one line per object (or a JSON array), every
// counter by group (or a JSON object of groups).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tools/attach/attach.hpp"
#include "tools/hcaemu/cli.hpp"
#include "tools/libhcaemu/api.hpp"

namespace hcaemu::tools {

namespace {

constexpr const char* kDefaultDevice = "unix:/run/hcaemu.sock";

constexpr const char* kResHelp =
    "usage: hcaemu res show pd|mr|cq|qp|srq [--json] [--device unix:PATH]\n"
    "\n"
    "The objects of a running hcaemud, every client's, one line each: the owning client (its id,\n"
    "pid and name) and the object's attributes, as `rdma res show` lists them.\n"
    "  --json              a JSON array of objects instead\n"
    "  --device unix:PATH  the daemon's socket (default /run/hcaemu.sock)\n"
    "  -h, --help          this text\n";

constexpr const char* kStatHelp =
    "usage: hcaemu stat [--json] [--device unix:PATH]\n"
    "\n"
    "Every counter of a running hcaemud, `name value` one a line, by group: device (the HCA's\n"
    "counters, named as rxe and mlx5 name them), net (ARP, ND and the frames the IP side dropped),\n"
    "link (the ethdev), daemon (the control plane's own).\n"
    "  --json              a JSON object of groups, each an object of counters\n"
    "  --device unix:PATH  the daemon's socket (default /run/hcaemu.sock)\n"
    "  -h, --help          this text\n";

// JSON string text (RFC 8259 7): quotes, backslashes and control characters escaped.
std::string json_str(const std::string& s) {
    std::string o = "\"";
    for (const unsigned char c : s) {
        if (c == '"' || c == '\\') {
            o += '\\';
            o += char(c);
        } else if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            o += b;
        } else {
            o += char(c);
        }
    }
    return o + "\"";
}

// A decimal number stays a JSON number (no leading zero, at most 20 digits); anything else is a string.
std::string json_value(const std::string& v) {
    const bool num = !v.empty() && v.size() <= 20 && v.find_first_not_of("0123456789") == std::string::npos &&
                     (v.size() == 1 || v[0] != '0');
    return num ? v : json_str(v);
}

// Options both subcommands take. 0 taken (i advanced past it), 1 not an option of these, 2 usage error.
struct Common {
    bool json = false;
    std::string device = kDefaultDevice;
};
int take_common(const char* sub, int argc, char** argv, int& i, Common& c, int& rc) {
    const std::string a = argv[i];
    if (a == "--json") {
        c.json = true;
        return 0;
    }
    std::string err;
    const int t = take_device_option(argc, argv, i, c.device, err);
    if (t < 0) {
        rc = usage_error(sub, err);
        return 2;
    }
    return t > 0 ? 0 : 1;
}

// The daemon: "unix:PATH" only (an in-process HCA of this command would hold nothing).
std::unique_ptr<api::Context> open(const char* sub, const std::string& device, int& rc) {
    if (device.rfind("unix:", 0) != 0 || device.size() == 5) {
        rc = usage_error(sub, "--device: '" + device + "' is not unix:PATH (the socket of a running hcaemud)");
        return nullptr;
    }
    std::string err;
    auto ctx = api::open_device(device, AttachOptions{}, err);
    if (!ctx) {
        std::fprintf(stderr, "hcaemu %s: %s\n", sub, err.c_str());
        rc = kExitFail;
    }
    return ctx;
}

}  // namespace

int cmd_res(int argc, char** argv) {
    Common c;
    std::vector<std::string> words;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            std::fputs(kResHelp, stdout);
            return kExitOk;
        }
        int rc = 0;
        const int t = take_common("res", argc, argv, i, c, rc);
        if (t == 2) return rc;
        if (t == 0) continue;
        if (!a.empty() && a[0] == '-') return usage_error("res", "unknown option '" + a + "'");
        words.push_back(a);
    }
    if (words.empty() || words[0] != "show")
        return usage_error("res", words.empty() ? "what to do? res show pd|mr|cq|qp|srq"
                                                : "unknown command '" + words[0] + "' (res show pd|mr|cq|qp|srq)");
    if (words.size() < 2) return usage_error("res", "res show needs a kind: pd, mr, cq, qp or srq");
    size_t k = 0;
    while (k < size_t(api::ResKind::count) && words[1] != api::kResKindName[k]) ++k;
    if (k == size_t(api::ResKind::count))
        return usage_error("res", "unknown kind '" + words[1] + "': pd, mr, cq, qp or srq");
    if (words.size() > 2) return usage_error("res", "unexpected argument '" + words[2] + "'");

    int rc = 0;
    auto ctx = open("res", c.device, rc);
    if (!ctx) return rc;
    std::vector<api::ResEntry> list;
    if (const Status s = ctx->res_list(api::ResKind(k), list); s != Status::ok) {
        std::fprintf(stderr, "hcaemu res: the daemon refused the listing: %s\n", name(s));
        return kExitFail;
    }
    std::string out;
    if (c.json) {
        out = "[";
        for (size_t i = 0; i < list.size(); ++i) {
            const api::ResEntry& e = list[i];
            out += i ? ",\n {" : "\n {";
            out += "\"client\": " + std::to_string(e.client) + ", \"pid\": " + std::to_string(e.pid) +
                   ", \"comm\": " + json_str(e.comm);
            for (const auto& [n, v] : e.attrs) out += ", " + json_str(n) + ": " + json_value(v);
            out += "}";
        }
        out += list.empty() ? "]\n" : "\n]\n";
    } else {
        for (const api::ResEntry& e : list) {
            out += "client " + std::to_string(e.client) + " pid " + std::to_string(e.pid) + " comm " + e.comm;
            for (const auto& [n, v] : e.attrs) out += " " + n + " " + v;
            out += "\n";
        }
    }
    std::fputs(out.c_str(), stdout);
    return kExitOk;
}

int cmd_stat(int argc, char** argv) {
    Common c;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            std::fputs(kStatHelp, stdout);
            return kExitOk;
        }
        int rc = 0;
        const int t = take_common("stat", argc, argv, i, c, rc);
        if (t == 2) return rc;
        if (t == 0) continue;
        if (!a.empty() && a[0] == '-') return usage_error("stat", "unknown option '" + a + "'");
        return usage_error("stat", "unexpected argument '" + a + "'");
    }
    int rc = 0;
    auto ctx = open("stat", c.device, rc);
    if (!ctx) return rc;
    api::Stats st;
    if (const Status s = ctx->read_stats(st); s != Status::ok) {
        std::fprintf(stderr, "hcaemu stat: the daemon refused to read the counters: %s\n", name(s));
        return kExitFail;
    }
    const std::pair<const char*, const std::vector<std::pair<std::string, uint64_t>>*> groups[] = {
        {"device", &st.device}, {"net", &st.net}, {"link", &st.link}, {"daemon", &st.daemon}};
    std::string out;
    if (c.json) {
        out = "{";
        bool first_group = true;
        for (const auto& [g, v] : groups) {
            out += first_group ? "\n " : ",\n ";
            first_group = false;
            out += json_str(g) + ": {";
            for (size_t i = 0; i < v->size(); ++i)
                out += (i ? ", " : "") + json_str((*v)[i].first) + ": " + std::to_string((*v)[i].second);
            out += "}";
        }
        out += "\n}\n";
    } else {
        for (const auto& [g, v] : groups) {
            if (v->empty()) continue;
            out += std::string(g) + ":\n";
            for (const auto& [n, val] : *v) out += "  " + n + " " + std::to_string(val) + "\n";
        }
    }
    std::fputs(out.c_str(), stdout);
    return kExitOk;
}

}  // namespace hcaemu::tools
