// vigil-wake-floor: the kernel work of one wake cycle, with no daemon logic.
//
// vigil-bench's `floor` phase runs this next to vigild (see
// docs/performance.md, "The floor of a wake"): what a wake cycle costs when
// nothing but its unavoidable system calls run, on the same machine and in the
// same run, so that vigild's CPU per wake can be split into floor and vigild.
//
//   vigil-wake-floor driver CONTROL-SOCKET CGROUP-DIR STATE-DIR RECORD-FILE WAKE-WRITES ACK-WRITES THREADS
//   vigil-wake-floor responder RECORD-FILE THREADS        (started by the driver)
//
// The driver plays vigild's loop thread, single-threaded, on epoll: it puts a
// responder (the app) in its own cgroup, CGROUP-DIR, holds its cgroup.freeze
// open, listens on CONTROL-SOCKET for one client (the benchmark) and then,
// per request frame:
//
//   turn 1 (the request): the `wake` decision line and WAKE-WRITES journal
//          appends (each one write(2) to a file in STATE-DIR), thaw
//          (pwrite "0"), the event frame to the responder, the reply to the
//          benchmark;
//   turn 2 (the responder's ack): ACK-WRITES journal appends;
//   turn 3 (the responder's finished): the `suspend` decision line, freeze
//          (pwrite "1"). Like vigild it does not wait for `frozen 1`: the
//          benchmark watches cgroup.events from outside, as it does for vigild.
//
// The least a wake needs is WAKE-WRITES 1 (the event journaled before the app
// can see it) and ACK-WRITES 0; vigild made 2 and 1 until 2026-11-26 (a
// commit before the thaw, one at the event's send, one at the ack). A request
// of kind 'A' (awake) is the no-wake baseline: one journal append, no
// decision lines, no thaw or freeze; ACK-WRITES at the ack.
//
// The responder has THREADS threads, all but one blocked for good (the
// freezer's cost grows with the threads of the group it freezes and thaws:
// the demo app has 6); the one works: a blocking read of its socket; per event,
// the latency (now - the benchmark's send stamp) appended as a JSON line to
// RECORD-FILE (as the demo app does, so the benchmark reads both alike), then
// an ack frame and a finished frame, two writes, as VigilKit sends them.
//
// Frames are a 4-byte little-endian length and a body; bodies are padded to
// the sizes of vigild's frames of a wake, so the copies cost alike.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

enum { kRequest = 'W', kAwake = 'A', kEvent = 'E', kAck = 'K', kFinished = 'F', kReply = 'R', kReady = 'Y' };

// Sizes of vigild's frames of a wake (length prefix included), measured with strace.
enum { kEventFrameSize = 180, kReplyFrameSize = 70, kAckFrameSize = 50, kFinishedFrameSize = 60, kLineSize = 200 };

struct body {
    uint8_t kind;
    uint64_t seq;
    uint64_t sent;  // CLOCK_MONOTONIC ns, stamped by the benchmark
} __attribute__((packed));

static void die(const char *what, const char *detail) {
    fprintf(stderr, "vigil-wake-floor: %s%s%s: %s\n", what, detail ? " " : "", detail ? detail : "", strerror(errno));
    exit(1);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void write_all(int fd, const void *bytes, size_t count, const char *what) {
    const char *p = bytes;
    while (count > 0) {
        ssize_t n = write(fd, p, count);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) die("write", what);
        p += n;
        count -= (size_t)n;
    }
}

/// Sends one frame of `size` bytes (length prefix included) carrying `body`.
static void send_frame(int fd, struct body body, size_t size, const char *what) {
    uint8_t frame[256] = {0};
    uint32_t length = (uint32_t)(size - 4);
    memcpy(frame, &length, 4);
    memcpy(frame + 4, &body, sizeof body);
    write_all(fd, frame, size, what);
}

/// Reads frames from a stream socket into a buffer and hands out whole ones.
struct reader {
    int fd;
    uint8_t buffer[4096];
    size_t start, end;
};

/// Reads once (the socket is readable); returns 0 at end of file.
static int reader_fill(struct reader *r, const char *what) {
    if (r->start > 0) {
        memmove(r->buffer, r->buffer + r->start, r->end - r->start);
        r->end -= r->start;
        r->start = 0;
    }
    ssize_t n;
    do { n = read(r->fd, r->buffer + r->end, sizeof r->buffer - r->end); } while (n < 0 && errno == EINTR);
    if (n < 0) die("read", what);
    r->end += (size_t)n;
    return n > 0;
}

/// The next whole frame's body, or 0 when none is buffered.
static int reader_next(struct reader *r, struct body *body) {
    if (r->end - r->start < 4) return 0;
    uint32_t length;
    memcpy(&length, r->buffer + r->start, 4);
    if (length < sizeof *body || length > sizeof r->buffer - 4) {
        errno = EPROTO;
        die("frame", "length");
    }
    if (r->end - r->start < 4 + length) return 0;
    memcpy(body, r->buffer + r->start + 4, sizeof *body);
    r->start += 4 + length;
    return 1;
}

static void *idle_thread(void *unused) {
    (void)unused;
    for (;;) pause();
    return NULL;
}

static int responder(const char *record_path, int threads) {
    for (int i = 1; i < threads; i++) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, idle_thread, NULL) != 0) die("pthread_create", NULL);
    }
    int record = open(record_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (record < 0) die("open", record_path);
    struct reader r = {.fd = 3};
    send_frame(r.fd, (struct body){.kind = kReady}, kAckFrameSize, "ready");
    while (reader_fill(&r, "socket")) {
        struct body event;
        while (reader_next(&r, &event)) {
            uint64_t latency = now_ns() - event.sent;
            char line[128];
            int n = snprintf(line, sizeof line, "{\"seq\":%llu,\"latencyNs\":%llu}\n", (unsigned long long)event.seq,
                             (unsigned long long)latency);
            write_all(record, line, (size_t)n, record_path);
            send_frame(r.fd, (struct body){.kind = kAck, .seq = event.seq}, kAckFrameSize, "ack");
            send_frame(r.fd, (struct body){.kind = kFinished, .seq = event.seq}, kFinishedFrameSize, "finished");
        }
    }
    return 0;
}

/// One ext4 append of a line about as long as vigild's (a journal record, a decision line).
static void append_line(int fd, uint64_t seq) {
    char line[kLineSize];
    memset(line, 'x', sizeof line);
    int n = snprintf(line, sizeof line, "{\"seq\":%llu,", (unsigned long long)seq);
    line[n] = 'x';
    line[sizeof line - 1] = '\n';
    write_all(fd, line, sizeof line, "state file");
}

static void set_frozen(int freezer, int frozen) {
    if (pwrite(freezer, frozen ? "1" : "0", 1, 0) != 1) die("pwrite", "cgroup.freeze");
}

static int open_in(const char *directory, const char *name, int flags) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", directory, name);
    int fd = open(path, flags | O_CLOEXEC, 0644);
    if (fd < 0) die("open", path);
    return fd;
}

static int driver(const char *control_path, const char *cgroup, const char *state_dir, const char *record_path, int wake_writes,
                  int ack_writes, const char *threads) {
    if (wake_writes < 1 || ack_writes < 0) {
        errno = EINVAL;
        die("WAKE-WRITES must be at least 1 (the event is journaled before the app sees it), ACK-WRITES at least 0", NULL);
    }
    if (mkdir(cgroup, 0755) != 0 && errno != EEXIST) die("mkdir", cgroup);
    int journal = open_in(state_dir, "events.journal", O_WRONLY | O_APPEND | O_CREAT);
    int decisions = open_in(state_dir, "decisions.jsonl", O_WRONLY | O_APPEND | O_CREAT);

    // The responder is this program: its path, resolved before the fork
    // (under valgrind, exec of /proc/self/exe would start valgrind's tool).
    char self[4096];
    ssize_t self_length = readlink("/proc/self/exe", self, sizeof self - 1);
    if (self_length <= 0) die("readlink", "/proc/self/exe");
    self[self_length] = 0;

    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) die("socketpair", NULL);
    pid_t child = fork();
    if (child < 0) die("fork", NULL);
    if (child == 0) {
        // Into the cgroup before exec, as vigild's spawn does.
        int procs = open_in(cgroup, "cgroup.procs", O_WRONLY);
        if (write(procs, "0", 1) != 1) die("write", "cgroup.procs");
        close(procs);
        if (dup2(pair[1], 3) < 0) die("dup2", NULL);
        execl(self, "vigil-wake-floor", "responder", record_path, threads, (char *)NULL);
        die("exec", self);
    }
    close(pair[1]);
    int freezer = open_in(cgroup, "cgroup.freeze", O_WRONLY);
    struct reader app = {.fd = pair[0]};
    struct body body;
    while (!reader_next(&app, &body)) {
        if (!reader_fill(&app, "app socket")) die("the responder ended before it was ready", NULL);
    }

    int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    snprintf(address.sun_path, sizeof address.sun_path, "%s", control_path);
    if (bind(listener, (struct sockaddr *)&address, sizeof address) != 0 || listen(listener, 1) != 0) die("listen", control_path);
    struct reader control = {.fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC)};
    if (control.fd < 0) die("accept", control_path);
    close(listener);

    int poll = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event watch = {.events = EPOLLIN, .data.fd = control.fd};
    epoll_ctl(poll, EPOLL_CTL_ADD, control.fd, &watch);
    watch.data.fd = app.fd;
    epoll_ctl(poll, EPOLL_CTL_ADD, app.fd, &watch);

    int awake = 0;
    for (;;) {
        struct epoll_event ready[2];
        int count = epoll_wait(poll, ready, 2, -1);
        if (count < 0 && errno == EINTR) continue;
        if (count < 0) die("epoll_wait", NULL);
        for (int i = 0; i < count; i++) {
            struct reader *r = ready[i].data.fd == control.fd ? &control : &app;
            if (!reader_fill(r, r == &control ? "control socket" : "app socket")) return 0;  // the benchmark is done
            while (reader_next(r, &body)) {
                switch (body.kind) {
                case kRequest:
                case kAwake:
                    awake = body.kind == kAwake;
                    if (!awake) append_line(decisions, body.seq);
                    for (int w = 0; w < (awake ? 1 : wake_writes); w++) append_line(journal, body.seq);
                    if (!awake) set_frozen(freezer, 0);
                    send_frame(app.fd, (struct body){.kind = kEvent, .seq = body.seq, .sent = body.sent}, kEventFrameSize, "event");
                    send_frame(control.fd, (struct body){.kind = kReply, .seq = body.seq}, kReplyFrameSize, "reply");
                    break;
                case kAck:
                    for (int w = 0; w < ack_writes; w++) append_line(journal, body.seq);
                    break;
                case kFinished:
                    if (!awake) {
                        append_line(decisions, body.seq);
                        set_frozen(freezer, 1);
                    }
                    break;
                default:
                    errno = EPROTO;
                    die("unexpected frame", NULL);
                }
            }
        }
    }
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "responder") == 0) return responder(argv[2], atoi(argv[3]));
    if (argc == 9 && strcmp(argv[1], "driver") == 0 && atoi(argv[8]) >= 1) {
        return driver(argv[2], argv[3], argv[4], argv[5], atoi(argv[6]), atoi(argv[7]), argv[8]);
    }
    fprintf(stderr, "usage: vigil-wake-floor driver CONTROL-SOCKET CGROUP-DIR STATE-DIR RECORD-FILE WAKE-WRITES ACK-WRITES THREADS\n"
                    "       (vigil-bench --phases floor runs it; see docs/performance.md)\n");
    return 2;
}
