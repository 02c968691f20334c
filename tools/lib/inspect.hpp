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
#include "tools/lib/api.hpp"

namespace hcaemu::tools {
class Attached;
}

namespace hcaemu::api {

using ResAttrs = std::vector<std::pair<std::string, std::string>>;

// Calls f(handle, attrs) for every object of `kind` in the device's table, in table order. The
// handle is the object's hca_model handle (an owner map of the daemon's is keyed by it).
void res_walk(const Device& dev, ResKind kind, const std::function<void(uint32_t handle, ResAttrs&& attrs)>& f);

// device: kCounterName order, then one rx_err_NAME per packet parse error; net: kNetStatNames;
// link: the ethdev's frame counts and link events. `daemon` is left as it is.
void collect_stats(tools::Attached& a, Stats& out);

}  // namespace hcaemu::api
