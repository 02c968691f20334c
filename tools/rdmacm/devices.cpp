// librdmacm.so.1 on libhcaemu: the devices of our libibverbs (HCAEMU_DEVICE), each opened once,
// and their CMs reached through its private export (HCAEMU_VERBS_PRIVATE_1).
#include <cstdio>
#include <cstring>

#include "tools/rdmacm/rdmacm.hpp"
#include "tools/verbs/hcaemu_private.hpp"

namespace hcaemu::rdmacm {

bool open_real_devices(std::vector<std::unique_ptr<Device>>& out) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list) return false;
    for (int i = 0; i < n; ++i) {
        ibv_context* c = ibv_open_device(list[i]);
        if (!c) continue;  // libibverbs said why on stderr
        auto d = std::make_unique<Device>();
        d->verbs = c;
        d->lock = [c] {
            api::Context* a = hcaemu_verbs_lock_api(c);
            return a ? a->cm() : nullptr;
        };
        d->unlock = [c] { hcaemu_verbs_unlock_api(c); };
        ibv_device_attr attr{};
        if (ibv_query_device(c, &attr) == 0) {
            d->max_init_depth = uint8_t(attr.max_qp_init_rd_atom);
            d->max_resp_res = uint8_t(attr.max_qp_rd_atom);
        }
        api::Context* a = hcaemu_verbs_lock_api(c);
        const Gid g = a->gid();
        hcaemu_verbs_unlock_api(c);
        gid_to_sockaddr(g, d->ip);
        d->pd = ibv_alloc_pd(c);
        out.push_back(std::move(d));
    }
    ibv_free_device_list(list);
    return true;
}

}  // namespace hcaemu::rdmacm
