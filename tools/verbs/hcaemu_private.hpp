// libibverbs.so.1 on libhcaemu: what it exports for hcaemu's own librdmacm.so.1 (tools/rdmacm),
// under the private version HCAEMU_VERBS_PRIVATE_1 (no program links against it).
#pragma once
#include <infiniband/verbs.h>

#include "tools/libhcaemu/api.hpp"

extern "C" {
// The api::Context behind one of this library's contexts, with the node's mutex held until
// hcaemu_verbs_unlock_api (api objects are single-threaded). The unlock wakes a local HCA's
// progress thread, as a post does: a CM call may have queued MADs.
hcaemu::api::Context* hcaemu_verbs_lock_api(ibv_context* context);
void hcaemu_verbs_unlock_api(ibv_context* context);
// The libibverbs structs of hcaemu's attributes, as ibv_query_qp and ibv_query_ah fill them.
void hcaemu_verbs_to_ibv_qp_attr(const hcaemu::QpAttr& a, ibv_qp_attr& o);
void hcaemu_verbs_to_ibv_ah(const hcaemu::AhAttr& a, ibv_ah_attr& o);
}
