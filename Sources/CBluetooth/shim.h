// libbluetooth's socket declarations (libbluetooth-dev): AF_BLUETOOTH,
// BTPROTO_L2CAP, sockaddr_l2, BTPROTO_RFCOMM, sockaddr_rc, the BT_* socket options and LE address types.
// Only the headers are used (constants, structs and the inline helper
// below), so nothing links against libbluetooth.
#ifndef CBLUETOOTH_SHIM_H
#define CBLUETOOTH_SHIM_H

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <bluetooth/bluetooth.h>
#include <bluetooth/l2cap.h>
#include <bluetooth/rfcomm.h>

// SOL_BLUETOOTH is 274; the header defines it, Swift cannot always import it.
static const int vigil_sol_bluetooth = SOL_BLUETOOTH;

// One read from a Bluetooth socket (an SDU from a SOCK_SEQPACKET L2CAP socket, bytes from an RFCOMM one), with the socket's drop counter
// (SO_RXQ_OVFL: SDUs the kernel discarded because the receive queue was
// full) when the kernel attached it. CMSG_* are macros Swift cannot call.
// Returns recvmsg's result; *truncated is set when the SDU was longer than
// `length` (its tail is lost).
static inline ssize_t vigil_bluetooth_recv(int fd, void *buffer, size_t length, int flags,
                                       uint32_t *drops, int *has_drops, int *truncated) {
    struct iovec iov = {.iov_base = buffer, .iov_len = length};
    union {
        char bytes[CMSG_SPACE(sizeof(uint32_t))];
        struct cmsghdr align;
    } control;
    struct msghdr message;
    memset(&message, 0, sizeof message);
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    message.msg_control = control.bytes;
    message.msg_controllen = sizeof control.bytes;
    ssize_t count = recvmsg(fd, &message, flags);
    *has_drops = 0;
    *truncated = 0;
    if (count < 0) return count;
    *truncated = (message.msg_flags & MSG_TRUNC) != 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&message); c != NULL; c = CMSG_NXTHDR(&message, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL && c->cmsg_len >= CMSG_LEN(sizeof(uint32_t))) {
            memcpy(drops, CMSG_DATA(c), sizeof(uint32_t));
            *has_drops = 1;
        }
    }
    return count;
}

#endif
