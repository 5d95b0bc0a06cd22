// The fd keeper (`vigild --fd-keeper`) and the descriptor passing it uses.
//
// A tty discards its unread input when its last open file is closed, and the
// kernel closes a killed daemon's files at once: bytes an accessory had sent
// but vigild had not read yet were lost with every SIGKILL of vigild. The
// keeper is a separate process that holds a duplicate of each open port, so
// the port is never closed by a daemon's death; the next daemon takes the
// duplicates back and reads on where the dead one stopped. It is what
// systemd's file descriptor store does for a service, for daemons that run
// without systemd. It stays small and in C: it must never be the one to fail.
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "CVigilShim.h"

int vigil_send_with_fd(int socket, const void *message, size_t length, int fd) {
    struct iovec iov = { .iov_base = (void *)message, .iov_len = length };
    union { struct cmsghdr header; char space[CMSG_SPACE(sizeof(int))]; } control;
    memset(&control, 0, sizeof control);
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (fd >= 0) {
        msg.msg_control = control.space;
        msg.msg_controllen = sizeof control.space;
        struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
    }
    ssize_t sent;
    do sent = sendmsg(socket, &msg, MSG_NOSIGNAL); while (sent < 0 && errno == EINTR);
    return sent < 0 ? -1 : 0;
}

static ssize_t receive(int socket, void *buffer, size_t capacity, int *fd, int flags) {
    *fd = -1;
    struct iovec iov = { .iov_base = buffer, .iov_len = capacity };
    union { struct cmsghdr header; char space[CMSG_SPACE(sizeof(int) * 4)]; } control;
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space,
                          .msg_controllen = sizeof control.space };
    ssize_t length;
    do length = recvmsg(socket, &msg, MSG_CMSG_CLOEXEC | flags); while (length < 0 && errno == EINTR);
    if (length < 0) return -1;
    // Take the first descriptor; close any others a confused peer attached.
    for (struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg); cmsg; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
        if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t index = 0; index < count; index++) {
            int received;
            memcpy(&received, CMSG_DATA(cmsg) + index * sizeof(int), sizeof(int));
            if (*fd < 0) *fd = received; else close(received);
        }
    }
    if (msg.msg_flags & MSG_TRUNC) {  // longer than any request: refused
        if (*fd >= 0) close(*fd);
        *fd = -1;
        errno = EMSGSIZE;
        return -1;
    }
    return length;
}

ssize_t vigil_receive_with_fd(int socket, void *buffer, size_t capacity, int *fd) {
    return receive(socket, buffer, capacity, fd, 0);
}

// MARK: The keeper

enum { NAME_MAX_LENGTH = 255, ENTRIES_MAX = 4096 };

struct entry {
    char name[NAME_MAX_LENGTH + 1];
    int fd;
};

/// What one keeper holds. Not static: tests run keepers on threads of one process.
struct kept {
    struct entry *entries;
    size_t count, capacity;
};

static struct entry *find(struct kept *kept, const char *name) {
    for (size_t index = 0; index < kept->count; index++) {
        if (strcmp(kept->entries[index].name, name) == 0) return &kept->entries[index];
    }
    return NULL;
}

static void put(struct kept *kept, const char *name, int fd) {
    struct entry *existing = find(kept, name);
    if (existing) {
        close(existing->fd);
        existing->fd = fd;
        return;
    }
    if (kept->count == ENTRIES_MAX) { close(fd); return; }
    if (kept->count == kept->capacity) {
        size_t capacity = kept->capacity ? kept->capacity * 2 : 16;
        struct entry *grown = realloc(kept->entries, capacity * sizeof *grown);
        if (!grown) { close(fd); return; }
        kept->entries = grown;
        kept->capacity = capacity;
    }
    strcpy(kept->entries[kept->count].name, name);
    kept->entries[kept->count].fd = fd;
    kept->count++;
}

static void drop(struct kept *kept, const char *name) {
    struct entry *existing = find(kept, name);
    if (!existing) return;
    close(existing->fd);
    *existing = kept->entries[--kept->count];
}

static void drop_all(struct kept *kept) {
    for (size_t index = 0; index < kept->count; index++) close(kept->entries[index].fd);
    free(kept->entries);
    *kept = (struct kept){ 0 };
}

/// One request of the daemon's; returns 1 when the keeper should end.
static int serve(struct kept *kept, int client, const char *request, size_t length, int fd) {
    char name[NAME_MAX_LENGTH + 1] = "";
    if (length > 2 && length - 2 <= NAME_MAX_LENGTH && request[1] == ' ') {
        memcpy(name, request + 2, length - 2);
        name[length - 2] = 0;
        if (strlen(name) != length - 2) name[0] = 0;  // an embedded NUL: refused
    }
    switch (length > 0 ? request[0] : 0) {
    case 'P':  // keep: "P name" with the descriptor attached
        if (fd >= 0 && name[0]) { put(kept, name, fd); fd = -1; }
        break;
    case 'D':  // drop: "D name"
        if (name[0]) drop(kept, name);
        break;
    case 'L':  // list: one "F name" with its descriptor each, then "E"
        for (size_t index = 0; index < kept->count; index++) {
            char reply[NAME_MAX_LENGTH + 3];
            size_t size = strlen(kept->entries[index].name);
            reply[0] = 'F';
            reply[1] = ' ';
            memcpy(reply + 2, kept->entries[index].name, size);
            if (vigil_send_with_fd(client, reply, size + 2, kept->entries[index].fd) != 0) break;
        }
        (void)vigil_send_with_fd(client, "E", 1, -1);
        break;
    case 'Q':  // quit: the daemon stops for good and has closed its ports
        if (fd >= 0) close(fd);
        return 1;
    }
    if (fd >= 0) close(fd);
    return 0;
}

void vigil_fd_keeper_ignore_signals(void) {
    signal(SIGHUP, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
}

/// Serves what a departing daemon sent before it went, without waiting.
/// Returns 1 if one of those requests ends the keeper.
static int drain(struct kept *kept, int client) {
    for (;;) {
        char request[NAME_MAX_LENGTH + 3];
        int fd;
        ssize_t length = receive(client, request, sizeof request, &fd, MSG_DONTWAIT);
        if (length < 0 && errno == EMSGSIZE) continue;
        if (length <= 0) return 0;
        if (serve(kept, client, request, (size_t)length, fd)) return 1;
    }
}

int vigil_fd_keeper_serve(int listener, int idle_seconds) {
    uid_t owner = getuid();
    struct kept kept = { 0 };
    struct pollfd *watched = NULL;
    size_t watched_capacity = 0;
    int client = -1;
    for (;;) {
        // With no daemon, the held ports are watched too: one whose device is
        // gone (a hang-up) is of no use to the next daemon and is let go.
        size_t count = 2 + (client < 0 ? kept.count : 0);
        if (count > watched_capacity) {
            struct pollfd *grown = realloc(watched, count * sizeof *grown);
            if (!grown) break;
            watched = grown;
            watched_capacity = count;
        }
        watched[0] = (struct pollfd){ .fd = listener, .events = POLLIN };
        watched[1] = (struct pollfd){ .fd = client, .events = POLLIN };  // ignored while -1
        for (size_t index = 2; index < count; index++) {
            watched[index] = (struct pollfd){ .fd = kept.entries[index - 2].fd, .events = 0 };
        }
        int ready = poll(watched, count, client >= 0 ? -1 : idle_seconds * 1000);
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) break;  // no daemon came back in time (or poll failed)
        if (client < 0 && count > 2) {
            for (size_t index = count - 1; index >= 2; index--) {  // from the end: drop() moves the last entry
                if (watched[index].revents & (POLLHUP | POLLERR | POLLNVAL)) drop(&kept, kept.entries[index - 2].name);
            }
            if (kept.count == 0 && !(watched[0].revents & POLLIN)) break;  // nothing left to keep
        }
        if (watched[0].revents & POLLIN) {
            int accepted = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
            struct ucred peer;
            socklen_t size = sizeof peer;
            if (accepted >= 0) {
                if (getsockopt(accepted, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 || peer.uid != owner) {
                    close(accepted);
                } else {
                    // The newest daemon is the live one; what the previous one
                    // sent before it went (its last ports) is kept first.
                    if (client >= 0) {
                        int quit = drain(&kept, client);
                        close(client);
                        if (quit) { close(accepted); break; }
                    }
                    client = accepted;
                    continue;
                }
            }
        }
        if (client >= 0 && watched[1].revents) {
            char request[NAME_MAX_LENGTH + 3];
            int fd;
            ssize_t length = vigil_receive_with_fd(client, request, sizeof request, &fd);
            if (length < 0 && errno == EMSGSIZE) continue;  // refused; the daemon goes on
            if (length <= 0) {  // the daemon is gone: keep everything for the next one
                if (fd >= 0) close(fd);
                close(client);
                client = -1;
                if (kept.count == 0) break;  // nothing to keep: the next daemon starts its own
                continue;
            }
            if (serve(&kept, client, request, (size_t)length, fd)) break;
        }
    }
    if (client >= 0) close(client);
    free(watched);
    drop_all(&kept);
    return 0;
}
