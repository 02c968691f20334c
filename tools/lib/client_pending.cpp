// TEMPORARY: replaced by client.cpp at merge
#include "tools/lib/api.hpp"

namespace hcaemu::api {

std::unique_ptr<Context> open_daemon(const std::string&, std::string& err) {
    err = "hcaemu was built without the daemon client";
    return nullptr;
}

}  // namespace hcaemu::api
