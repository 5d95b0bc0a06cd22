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
#include <sys/inotify.h>
#include <sys/signalfd.h>

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

int vigil_peer_groups(int fd, gid_t *groups, int capacity) {
#ifdef SO_PEERGROUPS
    socklen_t length = (socklen_t)(capacity > 0 ? capacity : 0) * sizeof(gid_t);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &length) == 0) return (int)(length / sizeof(gid_t));
    if (errno == ERANGE) return (int)(length / sizeof(gid_t));
    return -1;
#else
    (void)fd; (void)groups; (void)capacity;
    errno = ENOPROTOOPT;
    return -1;
#endif
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

int vigil_signalfd(const int *signals, int count) {
    sigset_t set;
    sigemptyset(&set);
    for (int i = 0; i < count; i++) sigaddset(&set, signals[i]);
    int result = pthread_sigmask(SIG_BLOCK, &set, NULL);
    if (result != 0) {
        errno = result;
        return -1;
    }
    return signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
}

int vigil_signalfd_read(int fd) {
    struct signalfd_siginfo info;
    ssize_t length;
    do {
        length = read(fd, &info, sizeof info);
    } while (length < 0 && errno == EINTR);
    if (length < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    if (length != (ssize_t)sizeof info) {
        errno = EIO;
        return -1;
    }
    return (int)info.ssi_signo;
}

int vigil_inotify_init(void) {
    return inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
}

int vigil_inotify_watch_directory(int fd, const char *path) {
    return inotify_add_watch(fd, path, IN_CREATE | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR);
}

int vigil_inotify_unwatch(int fd, int watch) {
    return inotify_rm_watch(fd, watch);
}
