// What `hcaemu res show` and `hcaemu stat` report about a device, computed in one place for the
// in-process context (local.cpp) and for hcaemud: each object's attributes as name/value text, and
// the device's, the IP side's and the link's counters. Control path only.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "hca_model/device.hpp"
#include "tools/libhcaemu/api.hpp"

namespace hcaemu::tools {
class Attached;
}
namespace hcaemu::port {
struct NetStats;
class DpdkPort;
}

namespace hcaemu::api {

using ResAttrs = std::vector<std::pair<std::string, std::string>>;
using Counts = std::vector<std::pair<std::string, uint64_t>>;

// One object's attributes, as both `res show` views list them (keys, addresses and access in hex).
ResAttrs res_attrs(const PdObj& p);
ResAttrs res_attrs(const MrObj& m);
ResAttrs res_attrs(const CqObj& c);
ResAttrs res_attrs(const QpObj& q);
ResAttrs res_attrs(const SrqObj& s);

// Calls f(handle, attrs) for every object of `kind` in the device's table, in table order. The
// handle is the object's hca_model handle (an owner map of the daemon's is keyed by it).
void res_walk(const Device& dev, ResKind kind, const std::function<void(uint32_t handle, ResAttrs&& attrs)>& f);

// The counter groups of `hcaemu stat`: device (kCounterName order, then one rx_err_NAME per packet
// parse error), net (kNetStatNames), link (the ethdev's frame counts and link events).
Counts device_counts(const Counters& c);
Counts net_counts(const port::NetStats& n);
Counts link_counts(port::DpdkPort& d);
// With --conform: the monitor's frames and its count per rule ("conform_resp_unsolicited"), appended.
void add_conform_counts(const tools::Attached& a, Counts& out);
// All three of an attached HCA. `daemon` is left as it is.
void collect_stats(tools::Attached& a, Stats& out);

}  // namespace hcaemu::api
