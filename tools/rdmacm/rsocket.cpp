// librdmacm.so.1 on libhcaemu: the rsocket calls librdmacm exports (rdma/rsocket.h). hcaemu has no
// rsockets: rsocket() fails with ENOSYS, so no descriptor is ever an rsocket, and the calls on a
// descriptor answer as librdmacm does for one that is not (EBADF). rpoll and rselect take only
// ordinary descriptors, which librdmacm polls as poll(2) and select(2) do: the examples (rping,
// udaddy, ...) call rpoll on their event channel's fd.
#include <poll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstdarg>

#include "tools/rdmacm/rdmacm.hpp"

using hcaemu::rdmacm::err;

extern "C" {
int rsocket(int, int, int);
int rbind(int, const sockaddr*, socklen_t);
int rlisten(int, int);
int raccept(int, sockaddr*, socklen_t*);
int rconnect(int, const sockaddr*, socklen_t);
int rshutdown(int, int);
int rclose(int);
ssize_t rrecv(int, void*, size_t, int);
ssize_t rrecvfrom(int, void*, size_t, int, sockaddr*, socklen_t*);
ssize_t rrecvmsg(int, msghdr*, int);
ssize_t rsend(int, const void*, size_t, int);
ssize_t rsendto(int, const void*, size_t, int, const sockaddr*, socklen_t);
ssize_t rsendmsg(int, const msghdr*, int);
ssize_t rread(int, void*, size_t);
ssize_t rreadv(int, const iovec*, int);
ssize_t rwrite(int, const void*, size_t);
ssize_t rwritev(int, const iovec*, int);
int rpoll(pollfd*, nfds_t, int);
int rselect(int, fd_set*, fd_set*, fd_set*, timeval*);
int rgetpeername(int, sockaddr*, socklen_t*);
int rgetsockname(int, sockaddr*, socklen_t*);
int rsetsockopt(int, int, int, const void*, socklen_t);
int rgetsockopt(int, int, int, void*, socklen_t*);
int rfcntl(int, int, ...);
off_t riomap(int, void*, size_t, int, int, off_t);
int riounmap(int, void*, size_t);
size_t riowrite(int, const void*, size_t, off_t, int);

int rsocket(int, int, int) { return err(ENOSYS); }
int rbind(int, const sockaddr*, socklen_t) { return err(EBADF); }
int rlisten(int, int) { return err(EBADF); }
int raccept(int, sockaddr*, socklen_t*) { return err(EBADF); }
int rconnect(int, const sockaddr*, socklen_t) { return err(EBADF); }
int rshutdown(int, int) { return err(EBADF); }
int rclose(int) { return err(EBADF); }
ssize_t rrecv(int, void*, size_t, int) { return err(EBADF); }
ssize_t rrecvfrom(int, void*, size_t, int, sockaddr*, socklen_t*) { return err(EBADF); }
ssize_t rrecvmsg(int, msghdr*, int) { return err(EBADF); }
ssize_t rsend(int, const void*, size_t, int) { return err(EBADF); }
ssize_t rsendto(int, const void*, size_t, int, const sockaddr*, socklen_t) { return err(EBADF); }
ssize_t rsendmsg(int, const msghdr*, int) { return err(EBADF); }
ssize_t rread(int, void*, size_t) { return err(EBADF); }
ssize_t rreadv(int, const iovec*, int) { return err(EBADF); }
ssize_t rwrite(int, const void*, size_t) { return err(EBADF); }
ssize_t rwritev(int, const iovec*, int) { return err(EBADF); }
int rpoll(pollfd* fds, nfds_t nfds, int timeout) { return ::poll(fds, nfds, timeout); }
int rselect(int nfds, fd_set* r, fd_set* w, fd_set* e, timeval* t) { return ::select(nfds, r, w, e, t); }
int rgetpeername(int, sockaddr*, socklen_t*) { return err(EBADF); }
int rgetsockname(int, sockaddr*, socklen_t*) { return err(EBADF); }
int rsetsockopt(int, int, int, const void*, socklen_t) { return err(EBADF); }
int rgetsockopt(int, int, int, void*, socklen_t*) { return err(EBADF); }
int rfcntl(int, int, ...) { return err(EBADF); }
off_t riomap(int, void*, size_t, int, int, off_t) { return err(EBADF); }
int riounmap(int, void*, size_t) { return err(EBADF); }
size_t riowrite(int, const void*, size_t, off_t, int) {
    errno = EBADF;
    return 0;
}
}
