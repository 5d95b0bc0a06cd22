// Thin wrappers for _GNU_SOURCE declarations and variadic syscall(2).
#define _GNU_SOURCE
#include "CVigilShim.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

pid_t vigil_gettid(void) {
    return (pid_t)syscall(SYS_gettid);
}

void vigil_set_thread_name(const char *name) {
    char truncated[16];
    strncpy(truncated, name, sizeof truncated - 1);
    truncated[sizeof truncated - 1] = '\0';
    (void)pthread_setname_np(pthread_self(), truncated);
}

int vigil_accept(int fd) {
    return accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
}

int vigil_peer_credentials(int fd, pid_t *pid, uid_t *uid, gid_t *gid) {
    struct ucred credentials;
    socklen_t length = sizeof credentials;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return -1;
    *pid = credentials.pid;
    *uid = credentials.uid;
    *gid = credentials.gid;
    return 0;
}

int vigil_pidfd_open(pid_t pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

int vigil_pidfd_send_signal(int pidfd, int signal) {
    return (int)syscall(SYS_pidfd_send_signal, pidfd, signal, NULL, 0);
}

int vigil_reap(int pidfd, pid_t pid, int *exited, int *code) {
    siginfo_t info;
    memset(&info, 0, sizeof info);
    int result;
    do {
        result = pidfd >= 0
            ? waitid((idtype_t)P_PIDFD, (id_t)pidfd, &info, WEXITED | WNOHANG)
            : waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG);
    } while (result != 0 && errno == EINTR);
    if (result != 0) return -1;
    if (info.si_pid == 0) return 0;
    *exited = info.si_code == CLD_EXITED;
    *code = info.si_status;
    return 1;
}

int vigil_punch_hole(int fd, long long offset, long long length) {
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)length);
}
