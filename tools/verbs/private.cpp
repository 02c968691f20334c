// libibverbs.so.1 on libhcaemu: IBVERBS_PRIVATE_34, the interface rdma-core's providers (libmlx5,
// librxe, ...) link against. hcaemu loads no provider, but a program may load one anyway (DPDK's
// mlx5 driver plugin pulls in libmlx5): these let it load, register nothing and open nothing.
// ibv_query_gid_type, which librdmacm calls, answers for real.
#include <cerrno>
#include <cstdint>

#include "tools/verbs/hcaemu_private.hpp"
#include "tools/verbs/verbs.hpp"

extern "C" {

// Declared here: rdma-core installs no driver.h.
int ibv_cmd_advise_mr();
int ibv_cmd_alloc_dm();
int ibv_cmd_alloc_mw();
int ibv_cmd_alloc_pd();
int ibv_cmd_attach_mcast();
int ibv_cmd_close_xrcd();
int ibv_cmd_create_ah();
int ibv_cmd_create_counters();
int ibv_cmd_create_cq();
int ibv_cmd_create_cq_ex();
int ibv_cmd_create_flow();
int ibv_cmd_create_flow_action_esp();
int ibv_cmd_create_qp();
int ibv_cmd_create_qp_ex();
int ibv_cmd_create_qp_ex2();
int ibv_cmd_create_rwq_ind_table();
int ibv_cmd_create_srq();
int ibv_cmd_create_srq_ex();
int ibv_cmd_create_wq();
int ibv_cmd_dealloc_mw();
int ibv_cmd_dealloc_pd();
int ibv_cmd_dereg_mr();
int ibv_cmd_destroy_ah();
int ibv_cmd_destroy_counters();
int ibv_cmd_destroy_cq();
int ibv_cmd_destroy_flow();
int ibv_cmd_destroy_flow_action();
int ibv_cmd_destroy_qp();
int ibv_cmd_destroy_rwq_ind_table();
int ibv_cmd_destroy_srq();
int ibv_cmd_destroy_wq();
int ibv_cmd_detach_mcast();
int ibv_cmd_free_dm();
int ibv_cmd_get_context();
int ibv_cmd_modify_cq();
int ibv_cmd_modify_flow_action_esp();
int ibv_cmd_modify_qp();
int ibv_cmd_modify_qp_ex();
int ibv_cmd_modify_srq();
int ibv_cmd_modify_wq();
int ibv_cmd_open_qp();
int ibv_cmd_open_xrcd();
int ibv_cmd_poll_cq();
int ibv_cmd_post_recv();
int ibv_cmd_post_send();
int ibv_cmd_post_srq_recv();
int ibv_cmd_query_context();
int ibv_cmd_query_device_any();
int ibv_cmd_query_mr();
int ibv_cmd_query_port();
int ibv_cmd_query_qp();
int ibv_cmd_query_srq();
int ibv_cmd_read_counters();
int ibv_cmd_reg_dm_mr();
int ibv_cmd_reg_dmabuf_mr();
int ibv_cmd_reg_mr();
int ibv_cmd_req_notify_cq();
int ibv_cmd_rereg_mr();
int ibv_cmd_resize_cq();
int execute_ioctl(void*, void*);
unsigned int __ioctl_final_num_attrs(unsigned int, void*);
void __verbs_log(void*, uint32_t, const char*, ...);
void* _verbs_init_and_alloc_context(void*, int, size_t, void*, uint32_t);
void* verbs_open_device(void*, void*);
void verbs_register_driver_34(const void*);
void verbs_set_ops(void*, const void*);
void verbs_init_cq(void*, void*, void*, void*);
void verbs_uninit_context(void*);
int ibv_read_ibdev_sysfs_file(char*, size_t, const char*, const char*, ...);
int ibv_query_gid_type(ibv_context*, uint8_t, unsigned int, int*);
extern bool verbs_allow_disassociate_destroy;
bool verbs_allow_disassociate_destroy = false;

// The kernel command interface: there is no kernel device (EOPNOTSUPP, as a provider gets it for
// a command its kernel lacks).
int ibv_cmd_advise_mr() { return EOPNOTSUPP; }
int ibv_cmd_alloc_dm() { return EOPNOTSUPP; }
int ibv_cmd_alloc_mw() { return EOPNOTSUPP; }
int ibv_cmd_alloc_pd() { return EOPNOTSUPP; }
int ibv_cmd_attach_mcast() { return EOPNOTSUPP; }
int ibv_cmd_close_xrcd() { return EOPNOTSUPP; }
int ibv_cmd_create_ah() { return EOPNOTSUPP; }
int ibv_cmd_create_counters() { return EOPNOTSUPP; }
int ibv_cmd_create_cq() { return EOPNOTSUPP; }
int ibv_cmd_create_cq_ex() { return EOPNOTSUPP; }
int ibv_cmd_create_flow() { return EOPNOTSUPP; }
int ibv_cmd_create_flow_action_esp() { return EOPNOTSUPP; }
int ibv_cmd_create_qp() { return EOPNOTSUPP; }
int ibv_cmd_create_qp_ex() { return EOPNOTSUPP; }
int ibv_cmd_create_qp_ex2() { return EOPNOTSUPP; }
int ibv_cmd_create_rwq_ind_table() { return EOPNOTSUPP; }
int ibv_cmd_create_srq() { return EOPNOTSUPP; }
int ibv_cmd_create_srq_ex() { return EOPNOTSUPP; }
int ibv_cmd_create_wq() { return EOPNOTSUPP; }
int ibv_cmd_dealloc_mw() { return EOPNOTSUPP; }
int ibv_cmd_dealloc_pd() { return EOPNOTSUPP; }
int ibv_cmd_dereg_mr() { return EOPNOTSUPP; }
int ibv_cmd_destroy_ah() { return EOPNOTSUPP; }
int ibv_cmd_destroy_counters() { return EOPNOTSUPP; }
int ibv_cmd_destroy_cq() { return EOPNOTSUPP; }
int ibv_cmd_destroy_flow() { return EOPNOTSUPP; }
int ibv_cmd_destroy_flow_action() { return EOPNOTSUPP; }
int ibv_cmd_destroy_qp() { return EOPNOTSUPP; }
int ibv_cmd_destroy_rwq_ind_table() { return EOPNOTSUPP; }
int ibv_cmd_destroy_srq() { return EOPNOTSUPP; }
int ibv_cmd_destroy_wq() { return EOPNOTSUPP; }
int ibv_cmd_detach_mcast() { return EOPNOTSUPP; }
int ibv_cmd_free_dm() { return EOPNOTSUPP; }
int ibv_cmd_get_context() { return EOPNOTSUPP; }
int ibv_cmd_modify_cq() { return EOPNOTSUPP; }
int ibv_cmd_modify_flow_action_esp() { return EOPNOTSUPP; }
int ibv_cmd_modify_qp() { return EOPNOTSUPP; }
int ibv_cmd_modify_qp_ex() { return EOPNOTSUPP; }
int ibv_cmd_modify_srq() { return EOPNOTSUPP; }
int ibv_cmd_modify_wq() { return EOPNOTSUPP; }
int ibv_cmd_open_qp() { return EOPNOTSUPP; }
int ibv_cmd_open_xrcd() { return EOPNOTSUPP; }
int ibv_cmd_poll_cq() { return EOPNOTSUPP; }
int ibv_cmd_post_recv() { return EOPNOTSUPP; }
int ibv_cmd_post_send() { return EOPNOTSUPP; }
int ibv_cmd_post_srq_recv() { return EOPNOTSUPP; }
int ibv_cmd_query_context() { return EOPNOTSUPP; }
int ibv_cmd_query_device_any() { return EOPNOTSUPP; }
int ibv_cmd_query_mr() { return EOPNOTSUPP; }
int ibv_cmd_query_port() { return EOPNOTSUPP; }
int ibv_cmd_query_qp() { return EOPNOTSUPP; }
int ibv_cmd_query_srq() { return EOPNOTSUPP; }
int ibv_cmd_read_counters() { return EOPNOTSUPP; }
int ibv_cmd_reg_dm_mr() { return EOPNOTSUPP; }
int ibv_cmd_reg_dmabuf_mr() { return EOPNOTSUPP; }
int ibv_cmd_reg_mr() { return EOPNOTSUPP; }
int ibv_cmd_req_notify_cq() { return EOPNOTSUPP; }
int ibv_cmd_rereg_mr() { return EOPNOTSUPP; }
int ibv_cmd_resize_cq() { return EOPNOTSUPP; }
int execute_ioctl(void*, void*) { return EOPNOTSUPP; }
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void*) { return num_attrs; }
void __verbs_log(void*, uint32_t, const char*, ...) {}
void* _verbs_init_and_alloc_context(void*, int, size_t, void*, uint32_t) {
    errno = EOPNOTSUPP;
    return nullptr;
}
void* verbs_open_device(void*, void*) {
    errno = ENODEV;
    return nullptr;
}
void verbs_register_driver_34(const void*) {}  // a provider loads: it gets no device
void verbs_set_ops(void*, const void*) {}
void verbs_init_cq(void*, void*, void*, void*) {}
void verbs_uninit_context(void*) {}
int ibv_read_ibdev_sysfs_file(char*, size_t, const char*, const char*, ...) {
    errno = ENOENT;  // an hcaemu device has no sysfs directory
    return -1;
}

// enum ibv_gid_type_sysfs: 1 = IBV_GID_TYPE_SYSFS_ROCE_V2; every entry of hcaemu's table is one.
int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index, int* type) {
    ibv_gid_entry e;
    const int r = _ibv_query_gid_ex(context, port_num, index, &e, 0, sizeof e);
    if (r) {
        errno = r;
        return -1;
    }
    *type = 1;
    return 0;
}

}  // extern "C"

// HCAEMU_VERBS_PRIVATE_1 (hcaemu_private.hpp), for tools/rdmacm.
extern "C" {
hcaemu::api::Context* hcaemu_verbs_lock_api(ibv_context* context) {
    hcaemu::verbs::Node& n = hcaemu::verbs::node_of(context);
    n.mu.lock();
    return n.api.get();
}
void hcaemu_verbs_unlock_api(ibv_context* context) {
    hcaemu::verbs::Node& n = hcaemu::verbs::node_of(context);
    n.mu.unlock();
    n.wake();
}
void hcaemu_verbs_to_ibv_qp_attr(const hcaemu::QpAttr& a, ibv_qp_attr& o) { hcaemu::verbs::to_ibv_qp_attr(a, o); }
void hcaemu_verbs_to_ibv_ah(const hcaemu::AhAttr& a, ibv_ah_attr& o) { hcaemu::verbs::to_ibv(a, o); }
}
