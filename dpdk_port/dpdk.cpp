#include "dpdk_port/dpdk.hpp"

extern "C" {
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
}

#include <cstring>

namespace hcaemu::port {

std::vector<std::string> default_eal_args(int lcore) {
    return {"hcaemu", "--no-huge", "-m", "512", "--no-pci", "--no-shconf", "-l", std::to_string(lcore),
            "--log-level", "lib.eal:error"};
}

bool eal_start(const std::vector<std::string>& args, std::string& error) {
    static bool started = false;
    static std::string first_error = "not started";
    static bool tried = false;
    if (tried) {
        error = first_error;
        return started;
    }
    tried = true;
    std::vector<std::string> copy = args;  // rte_eal_init may reorder argv: keep our own strings
    std::vector<char*> argv;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int r = rte_eal_init(int(copy.size()), argv.data());
    if (r < 0) {
        first_error = std::string("rte_eal_init failed: ") + rte_strerror(rte_errno);
        error = first_error;
        return false;
    }
    started = true;
    first_error.clear();
    return true;
}

std::unique_ptr<DpdkPort> DpdkPort::open(uint16_t port_id, const DpdkPortConfig& cfg, std::string& error) {
    if (!rte_eth_dev_is_valid_port(port_id)) {
        error = "no DPDK port " + std::to_string(port_id);
        return nullptr;
    }
    std::unique_ptr<DpdkPort> p(new DpdkPort());
    p->port_ = port_id;
    p->mtu_ = cfg.mtu;
    // One mbuf holds a whole frame: mtu + Ethernet + one VLAN tag, after the headroom.
    const uint32_t room = RTE_PKTMBUF_HEADROOM + std::max<uint32_t>(cfg.mtu + 18, RTE_MBUF_DEFAULT_DATAROOM);
    const uint32_t n = uint32_t(cfg.rx_desc) + cfg.tx_desc + cfg.extra_mbufs;
    const std::string name = "hcaemu_pool_" + std::to_string(port_id);
    p->pool_ = rte_pktmbuf_pool_create(name.c_str(), n, 256, 0, uint16_t(std::min<uint32_t>(room, 65535)),
                                       int(rte_eth_dev_socket_id(port_id)) < 0 ? 0 : rte_eth_dev_socket_id(port_id));
    if (!p->pool_) {
        error = "mempool: " + std::string(rte_strerror(rte_errno));
        return nullptr;
    }
    rte_eth_conf conf{};
    int e = rte_eth_dev_configure(port_id, 1, 1, &conf);
    if (e == 0) {
        const int m = rte_eth_dev_set_mtu(port_id, uint16_t(cfg.mtu));
        if (m != 0 && m != -ENOTSUP) e = m;  // some vdevs (net_ring) have no MTU to set
    }
    if (e == 0) e = rte_eth_rx_queue_setup(port_id, 0, cfg.rx_desc, rte_eth_dev_socket_id(port_id), nullptr, p->pool_);
    if (e == 0) e = rte_eth_tx_queue_setup(port_id, 0, cfg.tx_desc, rte_eth_dev_socket_id(port_id), nullptr);
    if (e == 0) e = rte_eth_dev_start(port_id);
    if (e != 0) {
        error = "port " + std::to_string(port_id) + " setup: " + rte_strerror(-e);
        return nullptr;
    }
    p->started_ = true;
    rte_ether_addr a;
    if (cfg.mac) {
        std::memcpy(a.addr_bytes, cfg.mac->data(), 6);
        rte_eth_dev_default_mac_addr_set(port_id, &a);  // where the driver can; frames carry it anyway
        p->mac_ = *cfg.mac;
    } else {
        rte_eth_macaddr_get(port_id, &a);
        std::memcpy(p->mac_.data(), a.addr_bytes, 6);
    }
    return p;
}

DpdkPort::~DpdkPort() {
    if (started_) {
        rte_eth_dev_stop(port_);
        rte_eth_dev_close(port_);
    }
    if (pool_) rte_mempool_free(pool_);
}

bool DpdkPort::alloc(Frame& f) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool_);
    if (!m) {
        ++stats_.tx_no_buffer;
        return false;
    }
    f.handle = m;
    f.data = rte_pktmbuf_mtod(m, uint8_t*);
    f.cap = rte_pktmbuf_tailroom(m);
    f.len = 0;
    return true;
}

uint16_t DpdkPort::tx_burst(Frame* frames, uint16_t n) {
    rte_mbuf* mb[64];
    uint16_t k = n > 64 ? 64 : n;
    for (uint16_t i = 0; i < k; ++i) {
        auto* m = static_cast<rte_mbuf*>(frames[i].handle);
        m->data_len = uint16_t(frames[i].len);
        m->pkt_len = frames[i].len;
        mb[i] = m;
    }
    const uint16_t sent = rte_eth_tx_burst(port_, 0, mb, k);
    for (uint16_t i = 0; i < sent; ++i) {
        ++stats_.tx_frames;
        stats_.tx_bytes += frames[i].len;
        frames[i].handle = nullptr;  // the driver owns it now
    }
    return sent;
}

uint16_t DpdkPort::rx_burst(Frame* frames, uint16_t n) {
    rte_mbuf* mb[64];
    const uint16_t got = rte_eth_rx_burst(port_, 0, mb, n > 64 ? 64 : n);
    uint16_t k = 0;
    for (uint16_t i = 0; i < got; ++i) {
        rte_mbuf* m = mb[i];
        if (m->nb_segs != 1) {  // the parser needs a contiguous frame: scattered ones are dropped
            ++stats_.rx_dropped;
            rte_pktmbuf_free(m);
            continue;
        }
        frames[k] = Frame{rte_pktmbuf_mtod(m, uint8_t*), m->pkt_len, m->buf_len, 0, m};
        ++stats_.rx_frames;
        stats_.rx_bytes += m->pkt_len;
        ++k;
    }
    return k;
}

void DpdkPort::free(Frame& f) {
    if (f.handle) rte_pktmbuf_free(static_cast<rte_mbuf*>(f.handle));
    f.handle = nullptr;
}

bool make_ring_pair(const std::string& name, uint16_t& a, uint16_t& b, std::string& error) {
    rte_ring* ab = rte_ring_create((name + "_ab").c_str(), 4096, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
    rte_ring* ba = rte_ring_create((name + "_ba").c_str(), 4096, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (!ab || !ba) {
        error = "ring: " + std::string(rte_strerror(rte_errno));
        return false;
    }
    const int pa = rte_eth_from_rings((name + "_a").c_str(), &ba, 1, &ab, 1, 0);
    const int pb = rte_eth_from_rings((name + "_b").c_str(), &ab, 1, &ba, 1, 0);
    if (pa < 0 || pb < 0) {
        error = "net_ring: " + std::string(rte_strerror(rte_errno));
        return false;
    }
    a = uint16_t(pa);
    b = uint16_t(pb);
    return true;
}

}  // namespace hcaemu::port
