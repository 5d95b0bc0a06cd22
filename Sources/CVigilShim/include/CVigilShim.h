// CVigilShim: the few pieces of the Linux API that Swift cannot reach directly.
//
// Swift's Glibc module leaves out epoll, eventfd and timerfd, cannot see
// _GNU_SOURCE-only declarations (accept4, struct ucred), cannot call variadic
// syscall(2) or read siginfo_t's union-backed macros, and must not run code in
// a forked child of a multi-threaded process. Everything else stays in Swift.
#ifndef CVIGILSHIM_H
#define CVIGILSHIM_H

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <sys/types.h>

// MARK: Threads and sockets

/// The calling thread's kernel id, as in /proc/self/task/TID.
pid_t vigil_gettid(void);

/// Names the calling thread (truncated to 15 bytes) for ps, top and gdb.
void vigil_set_thread_name(const char *name);

/// accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK).
int vigil_accept(int fd);

/// Raises the soft open-file limit to the hard one (apps get the old one
/// back when spawned); the new soft limit in *soft. -1 with errno on failure.
int vigil_raise_nofile_limit(unsigned long *soft);

/// The peer's credentials from SO_PEERCRED, as of connect(2) time.
int vigil_peer_credentials(int fd, pid_t *pid, uid_t *uid, gid_t *gid);

/// The peer's supplementary groups from SO_PEERGROUPS (Linux 4.13), as of
/// connect(2) time. Returns how many it has (more than `capacity`: call again
/// with a larger buffer; only `capacity` were written), or -1 with errno set.
int vigil_peer_groups(int fd, gid_t *groups, int capacity);

// MARK: Signals and file system notifications

/// Blocks `signals` in the calling thread (threads it starts later inherit
/// the mask) and returns a signalfd for them (close-on-exec, non-blocking), so
/// an event loop reads them as data instead of a handler interrupting some
/// thread. Returns -1 with errno set on failure.
int vigil_signalfd(const int *signals, int count);

/// Reads one pending signal from a signalfd: its number, 0 when none is
/// pending, or -1 with errno set.
int vigil_signalfd_read(int fd);

/// inotify_init1(IN_NONBLOCK | IN_CLOEXEC).
int vigil_inotify_init(void);

/// Watches the directory `path` for entries created, moved in or whose
/// attributes change, and for the directory's own deletion or move
/// (IN_CREATE | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF |
/// IN_ONLYDIR). Returns the watch descriptor, or -1 with errno set.
int vigil_inotify_watch_directory(int fd, const char *path);

/// inotify_rm_watch(2).
int vigil_inotify_unwatch(int fd, int watch);

// MARK: Processes

/// pidfd_open(2); the descriptor is close-on-exec.
int vigil_pidfd_open(pid_t pid);

/// pidfd_send_signal(2) with no siginfo.
int vigil_pidfd_send_signal(int pidfd, int signal);

/// Non-blocking waitid(WEXITED | WNOHANG) by pidfd (when >= 0) or by pid.
/// Returns 1 when reaped (*exited: 1 for exit(), 0 for a signal; *code: the
/// status or signal), 0 while the child still runs, -1 with errno set.
int vigil_reap(int pidfd, pid_t pid, int *exited, int *code);

/// fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE): frees a file range's
/// pages, keeping the size. 0, or -1 with errno.
int vigil_punch_hole(int fd, long long offset, long long length);

/// The step of vigil_spawn that failed, reported back to the parent.
typedef enum vigil_spawn_step {
    VIGIL_SPAWN_PREPARE = 1,
    VIGIL_SPAWN_FORK,
    VIGIL_SPAWN_CGROUP,
    VIGIL_SPAWN_SESSION,
    VIGIL_SPAWN_STDIO,
    VIGIL_SPAWN_FILE_DESCRIPTORS,
    VIGIL_SPAWN_WORKING_DIRECTORY,
    VIGIL_SPAWN_EXEC,
    VIGIL_SPAWN_CREDENTIALS,
} vigil_spawn_step;

typedef struct vigil_spawn_request {
    const char *path;              ///< Executable; used as given by execve.
    char *const *argv;             ///< NULL-terminated, argv[0] included.
    char *const *envp;             ///< NULL-terminated, the whole environment.
    const char *working_directory; ///< NULL keeps the parent's.
    int cgroup_procs_fd;           ///< Open cgroup.procs to join, or -1.
    int stdin_fd;                  ///< Becomes fd 0.
    int output_fd;                 ///< Becomes fds 1 and 2.
    int new_session;               ///< Non-zero: setsid() in the child.
    int change_credentials;        ///< Non-zero: become uid/gid/groups below before exec.
    uid_t uid;                     ///< The user to run as (with change_credentials).
    gid_t gid;                     ///< Its primary group.
    const gid_t *groups;           ///< Its supplementary groups (may be NULL when group_count is 0).
    int group_count;
} vigil_spawn_request;

/// fork + execve with only async-signal-safe calls in the child. The child
/// joins its cgroup, gets default signal dispositions and an empty signal
/// mask, keeps only fds 0-2, and (with change_credentials) drops to its user:
/// setgroups, setgid, setuid, each checked, then its working directory as
/// that user. Returns 0 with *pid set, or an errno with
/// *failed_step set (the child, if any, has already been reaped).
int vigil_spawn(const vigil_spawn_request *request, pid_t *pid, vigil_spawn_step *failed_step);

// MARK: Serial ports

/// Error counters of a serial line since the driver loaded (TIOCGICOUNT),
/// copied out of <linux/serial.h>'s struct so Swift needs no kernel header.
typedef struct vigil_line_counters {
    int rx, tx;              ///< Characters received and sent.
    int frame, parity, brk;  ///< Framing errors, parity errors, breaks.
    int overrun;             ///< Characters lost: the UART's FIFO overflowed.
    int buf_overrun;         ///< Characters lost: the tty layer's buffer was full.
} vigil_line_counters;

/// TIOCGICOUNT. Returns 0, or -1 with errno set (ENOTTY, EINVAL or ENOIOCTLCMD
/// where the driver keeps no counters, e.g. ptys and most USB CDC-ACM).
int vigil_serial_line_counters(int fd, vigil_line_counters *counters);

/// Modem-line transitions counted by the driver (TIOCGICOUNT's cts, dsr,
/// rng and dcd): a pulse shorter than any polling interval still shows as
/// a count that grew. Returns 0, or -1 with errno set.
typedef struct vigil_modem_counters {
    int cts, dsr, rng, dcd;
} vigil_modem_counters;
int vigil_serial_modem_counters(int fd, vigil_modem_counters *counters);

/// Sets input and output speed to any rate (termios2 with BOTHER), leaving
/// every other termios field as it is. Returns 0, or -1 with errno set.
int vigil_serial_set_speed(int fd, unsigned int rate);

/// The output speed in bits per second as termios2 reports it (c_ospeed),
/// for standard and BOTHER rates alike. Returns 0, or -1 with errno set.
int vigil_serial_get_speed(int fd, unsigned int *rate);

/// RS-485 settings (struct serial_rs485, <linux/serial.h>): `flags` holds
/// the SER_RS485_* bits below; the delays are in milliseconds.
typedef struct vigil_rs485 {
    unsigned int flags;
    unsigned int delay_rts_before_send;
    unsigned int delay_rts_after_send;
} vigil_rs485;

enum {
    VIGIL_RS485_ENABLED = 1 << 0,
    VIGIL_RS485_RTS_ON_SEND = 1 << 1,
    VIGIL_RS485_RTS_AFTER_SEND = 1 << 2,
    VIGIL_RS485_RX_DURING_TX = 1 << 4,
};

/// TIOCGRS485 / TIOCSRS485 (the set writes back what the driver took).
/// Return 0, or -1 with errno set (ENOTTY or EINVAL where the driver has no
/// RS-485 support: ptys, USB CDC-ACM, most USB-serial adapters).
int vigil_serial_get_rs485(int fd, vigil_rs485 *settings);
int vigil_serial_set_rs485(int fd, vigil_rs485 *settings);

/// openpty(3) in raw mode (cfmakeraw, VMIN=1, VTIME=0), both ends
/// close-on-exec and the controller non-blocking. `name` receives the device
/// path (at least 64 bytes). Returns 0, or -1 with errno set.
int vigil_openpty(int *controller, int *device, char *name, size_t name_size);

// MARK: The fd keeper (fdkeeper.c)

/// Sends one message on a SOCK_SEQPACKET socket, with `fd` attached when it is
/// >= 0 (SCM_RIGHTS). No SIGPIPE. Returns 0, or -1 with errno set.
int vigil_send_with_fd(int socket, const void *message, size_t length, int fd);

/// Receives one message; `*fd` gets the descriptor attached to it (close-on-
/// exec), or -1. Returns its length (0: the peer is gone), or -1 with errno
/// set (EMSGSIZE for a message longer than `capacity`, which is discarded).
ssize_t vigil_receive_with_fd(int socket, void *buffer, size_t capacity, int *fd);

/// The keeper's signals: not the terminal's, not the daemon's. It ends on
/// "Q", SIGTERM or SIGKILL, or when it has no daemon and nothing to keep.
void vigil_fd_keeper_ignore_signals(void);

/// Runs the fd keeper on a listening SOCK_SEQPACKET socket until it is told
/// to quit, until its daemon leaves it holding nothing, or until no daemon
/// has been connected for `idle_seconds`. While no daemon is connected, a
/// held descriptor that hangs up (its device gone) is closed.
/// Requests: "P name" + fd keeps a duplicate under name (replacing one of that
/// name), "D name" drops it, "L" lists them ("F name" + fd each, then "E"),
/// "Q" ends it. Only peers of its own uid are served. Returns 0.
int vigil_fd_keeper_serve(int listener, int idle_seconds);

// MARK: hidraw (hidraw.c)

/// The report descriptor of a hidraw node (HIDIOCGRDESCSIZE, HIDIOCGRDESC)
/// into `buffer` (at most 4096 bytes, HID_MAX_DESCRIPTOR_SIZE). Returns its
/// length, or -1 with errno set (ENOTTY: not a hidraw node).
int vigil_hidraw_descriptor(int fd, unsigned char *buffer, size_t capacity);

/// The bus type and USB ids the kernel gives a hidraw node (HIDIOCGRAWINFO).
/// Returns 0, or -1 with errno set.
int vigil_hidraw_info(int fd, unsigned int *bustype, short *vendor, short *product);

/// HIDIOCGFEATURE: `buffer[0]` is the report id asked for; the report (its
/// id first) comes back in `buffer`. Returns its length, or -1 with errno set
/// (EPIPE, EIO: the device refused or has no such report).
int vigil_hidraw_get_feature(int fd, unsigned char *buffer, size_t length);

/// HIDIOCSFEATURE: sends `buffer` (report id first) as a feature report.
/// Returns the count the driver took, or -1 with errno set.
int vigil_hidraw_set_feature(int fd, const unsigned char *buffer, size_t length);

#endif
