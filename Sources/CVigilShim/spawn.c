// fork + execve for a multi-threaded parent.
//
// Between fork and execve the child may only make async-signal-safe calls:
// other threads' locks (malloc, the Swift runtime) were copied mid-use.
#define _GNU_SOURCE
#include "CVigilShim.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

struct failure {
    int step;
    int error;
};

__attribute__((noreturn))
static void fail(int report_fd, vigil_spawn_step step) {
    struct failure failure = { step, errno };
    // Smaller than PIPE_BUF, so a single write is atomic.
    ssize_t ignored = write(report_fd, &failure, sizeof failure);
    (void)ignored;
    _exit(127);
}

/// Marks every fd from 3 up close-on-exec, so the report pipe survives until execve.
static int close_inherited_fds(void) {
    if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return 0;
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
    for (rlim_t fd = 3; fd < limit.rlim_cur; fd++) (void)fcntl((int)fd, F_SETFD, FD_CLOEXEC);
    return 0;
}

/// The soft open-file limit vigild started with, restored in each app:
/// vigild raises its own (one daemon holds fds for many apps), but a program
/// that uses select() breaks above 1024 (systemd's advice, systemd.exec(5)).
static struct rlimit started_nofile = { 0, 0 };

int vigil_raise_nofile_limit(unsigned long *soft) {
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
    if (started_nofile.rlim_max == 0) started_nofile = limit;
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
    *soft = (unsigned long)limit.rlim_cur;
    return 0;
}

__attribute__((noreturn))
static void run_child(const vigil_spawn_request *request, int report_fd) {
    // Join the cgroup first, so anything the app forks starts inside it.
    if (request->cgroup_procs_fd >= 0 && write(request->cgroup_procs_fd, "0", 1) != 1) {
        fail(report_fd, VIGIL_SPAWN_CGROUP);
    }
    if (started_nofile.rlim_max != 0) (void)setrlimit(RLIMIT_NOFILE, &started_nofile);

    // Dispositions and the blocked mask come from the daemon's threads, not
    // the app's business. An all-zero kernel sigaction is SIG_DFL, no flags,
    // empty mask on every architecture; the raw call also resets the signals
    // glibc reserves for itself (32, 33), which its sigaction() refuses.
    static const unsigned long default_action[4] = { 0 };
    for (int signal = 1; signal < _NSIG; signal++) {
        (void)syscall(SYS_rt_sigaction, signal, default_action, NULL, (_NSIG - 1) / 8);
    }
    sigset_t empty;
    sigemptyset(&empty);
    sigprocmask(SIG_SETMASK, &empty, NULL);

    if (request->new_session && setsid() < 0) fail(report_fd, VIGIL_SPAWN_SESSION);

    // Copy sources above 2 first so that wiring one never clobbers another.
    int input = fcntl(request->stdin_fd, F_DUPFD_CLOEXEC, 3);
    int output = fcntl(request->output_fd, F_DUPFD_CLOEXEC, 3);
    if (input < 0 || output < 0) fail(report_fd, VIGIL_SPAWN_STDIO);
    if (dup2(input, 0) < 0 || dup2(output, 1) < 0 || dup2(output, 2) < 0) {
        fail(report_fd, VIGIL_SPAWN_STDIO);
    }

    if (close_inherited_fds() != 0) fail(report_fd, VIGIL_SPAWN_FILE_DESCRIPTORS);

    // Privileges last of all the steps that need them (the cgroup was joined
    // as the daemon), before the working directory, which the app's user must
    // be able to enter. Raw syscalls: glibc's wrappers would try to signal the
    // parent's other threads (its setxid broadcast), which the child does not
    // have. Groups first: once the uid is dropped, nothing else may change.
    if (request->change_credentials) {
        if (syscall(SYS_setgroups, (size_t)request->group_count, request->groups) != 0) {
            fail(report_fd, VIGIL_SPAWN_CREDENTIALS);
        }
        if (syscall(SYS_setresgid, request->gid, request->gid, request->gid) != 0) fail(report_fd, VIGIL_SPAWN_CREDENTIALS);
        if (syscall(SYS_setresuid, request->uid, request->uid, request->uid) != 0) fail(report_fd, VIGIL_SPAWN_CREDENTIALS);
        // A dropped process must not be able to get root back.
        if (request->uid != 0 && syscall(SYS_setuid, 0) == 0) {
            errno = EPERM;
            fail(report_fd, VIGIL_SPAWN_CREDENTIALS);
        }
        if (getuid() != request->uid || geteuid() != request->uid || getgid() != request->gid || getegid() != request->gid) {
            errno = EPERM;
            fail(report_fd, VIGIL_SPAWN_CREDENTIALS);
        }
    }

    if (request->working_directory && chdir(request->working_directory) != 0) {
        fail(report_fd, VIGIL_SPAWN_WORKING_DIRECTORY);
    }

    execve(request->path, request->argv, request->envp);
    fail(report_fd, VIGIL_SPAWN_EXEC);
}

int vigil_spawn(const vigil_spawn_request *request, pid_t *pid, vigil_spawn_step *failed_step) {
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) {
        *failed_step = VIGIL_SPAWN_PREPARE;
        return errno;
    }
    // The child replaces fds 0-2, so its end of the pipe must live above them.
    if (report[1] < 3) {
        int high = fcntl(report[1], F_DUPFD_CLOEXEC, 3);
        int error = errno;
        close(report[1]);
        if (high < 0) {
            close(report[0]);
            *failed_step = VIGIL_SPAWN_PREPARE;
            return error;
        }
        report[1] = high;
    }

    // No parent signal handler may run in the child before it resets them.
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    pid_t child = fork();
    if (child == 0) run_child(request, report[1]);
    int fork_error = errno;
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    close(report[1]);

    if (child < 0) {
        close(report[0]);
        *failed_step = VIGIL_SPAWN_FORK;
        return fork_error;
    }

    // EOF means execve succeeded and closed the pipe; data means a step failed.
    struct failure failure;
    ssize_t count;
    do {
        count = read(report[0], &failure, sizeof failure);
    } while (count < 0 && errno == EINTR);
    close(report[0]);

    if (count == (ssize_t)sizeof failure) {
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {}
        *failed_step = (vigil_spawn_step)failure.step;
        return failure.error;
    }
    *pid = child;
    return 0;
}
