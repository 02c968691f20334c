// librdmacm.so.1 on libhcaemu: rdma_getaddrinfo / rdma_freeaddrinfo over getaddrinfo(3), with
// librdmacm's mapping between the two (socket type <-> QP type, protocol <-> port space). No
// ibacm: ai_route and ai_connect stay empty. AF_IB hints are not supported (EAI_FAMILY).
#include <netdb.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tools/rdmacm/rdmacm.hpp"

using namespace hcaemu::rdmacm;

namespace {

void to_ai(const rdma_addrinfo& r, addrinfo& ai) {
    ai = {};
    if (r.ai_flags & RAI_PASSIVE) ai.ai_flags |= AI_PASSIVE;
    if (r.ai_flags & RAI_NUMERICHOST) ai.ai_flags |= AI_NUMERICHOST;
    ai.ai_family = r.ai_family;
    if (r.ai_qp_type == IBV_QPT_RC || r.ai_qp_type == IBV_QPT_UC) ai.ai_socktype = SOCK_STREAM;
    if (r.ai_qp_type == IBV_QPT_UD) ai.ai_socktype = SOCK_DGRAM;
    if (r.ai_port_space == RDMA_PS_TCP) ai.ai_protocol = IPPROTO_TCP;
    if (r.ai_port_space == RDMA_PS_UDP || r.ai_port_space == RDMA_PS_IPOIB) ai.ai_protocol = IPPROTO_UDP;
    if (r.ai_port_space == RDMA_PS_IB) ai.ai_protocol = ai.ai_socktype == SOCK_DGRAM ? IPPROTO_UDP : IPPROTO_TCP;
}

int copy_addr(sockaddr*& dst, socklen_t& dst_len, const sockaddr* src, socklen_t len) {
    dst = static_cast<sockaddr*>(std::malloc(len));
    if (!dst) return err(ENOMEM);
    std::memcpy(dst, src, len);
    dst_len = len;
    return 0;
}

int from_ai(rdma_addrinfo& r, const rdma_addrinfo* hints, const addrinfo& ai) {
    r.ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type
                   : ai.ai_socktype == SOCK_STREAM ? IBV_QPT_RC
                   : ai.ai_socktype == SOCK_DGRAM  ? IBV_QPT_UD
                                                   : 0;
    r.ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space
                      : ai.ai_protocol == IPPROTO_TCP ? RDMA_PS_TCP
                      : ai.ai_protocol == IPPROTO_UDP ? RDMA_PS_UDP
                                                      : 0;
    r.ai_family = ai.ai_family;
    const bool passive = ai.ai_flags & AI_PASSIVE;
    if (passive) r.ai_flags = RAI_PASSIVE;
    char*& canon = passive ? r.ai_src_canonname : r.ai_dst_canonname;
    if (ai.ai_canonname) canon = strdup(ai.ai_canonname);
    return passive ? copy_addr(r.ai_src_addr, r.ai_src_len, ai.ai_addr, ai.ai_addrlen)
                   : copy_addr(r.ai_dst_addr, r.ai_dst_len, ai.ai_addr, ai.ai_addrlen);
}

}  // namespace

extern "C" {

int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints, rdma_addrinfo** res) {
    if (!service && !node && !hints) return err(EINVAL);
    if (init()) return -1;
    if (hints && hints->ai_family == AF_IB) return EAI_FAMILY;  // no AF_IB (as librdmacm without it)
    auto* r = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
    if (!r) return err(ENOMEM);
    int ret = 0;
    if (node || service) {
        addrinfo h, *ai = nullptr;
        if (hints) to_ai(*hints, h);
        ret = getaddrinfo(node, service, hints ? &h : nullptr, &ai);
        if (!ret) {
            ret = from_ai(*r, hints, *ai);
            freeaddrinfo(ai);
        }
    } else {
        r->ai_flags = hints->ai_flags;
        r->ai_family = hints->ai_family;
        r->ai_qp_type = hints->ai_qp_type;
        r->ai_port_space = hints->ai_port_space;
        if (hints->ai_dst_len) ret = copy_addr(r->ai_dst_addr, r->ai_dst_len, hints->ai_dst_addr, hints->ai_dst_len);
    }
    if (!ret && !r->ai_src_len && hints && hints->ai_src_len)
        ret = copy_addr(r->ai_src_addr, r->ai_src_len, hints->ai_src_addr, hints->ai_src_len);
    if (ret) {
        rdma_freeaddrinfo(r);
        return ret;
    }
    *res = r;
    return 0;
}

void rdma_freeaddrinfo(rdma_addrinfo* res) {
    while (res) {
        rdma_addrinfo* r = res;
        res = res->ai_next;
        std::free(r->ai_connect);
        std::free(r->ai_route);
        std::free(r->ai_src_canonname);
        std::free(r->ai_dst_canonname);
        std::free(r->ai_src_addr);
        std::free(r->ai_dst_addr);
        std::free(r);
    }
}

}  // extern "C"
