// Serial-port calls whose types Swift cannot import: TIOCGICOUNT's
// struct serial_icounter_struct lives in a kernel header, and openpty's
// declaration is in <pty.h>, which Glibc's module map leaves out.
#define _GNU_SOURCE
#include "CVigilShim.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/serial.h>
#include <pty.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

int vigil_serial_line_counters(int fd, vigil_line_counters *counters) {
    struct serial_icounter_struct icount;
    memset(&icount, 0, sizeof icount);
    if (ioctl(fd, TIOCGICOUNT, &icount) != 0) return -1;
    counters->rx = icount.rx;
    counters->tx = icount.tx;
    counters->frame = icount.frame;
    counters->parity = icount.parity;
    counters->brk = icount.brk;
    counters->overrun = icount.overrun;
    counters->buf_overrun = icount.buf_overrun;
    return 0;
}

int vigil_openpty(int *controller, int *device, char *name, size_t name_size) {
    char path[128];
    struct termios raw;
    memset(&raw, 0, sizeof raw);
    cfmakeraw(&raw);
    raw.c_cflag |= CLOCAL | CREAD;
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    if (openpty(controller, device, path, &raw, NULL) != 0) return -1;
    int ok = fcntl(*controller, F_SETFD, FD_CLOEXEC) == 0
        && fcntl(*device, F_SETFD, FD_CLOEXEC) == 0
        && fcntl(*controller, F_SETFL, fcntl(*controller, F_GETFL) | O_NONBLOCK) == 0;
    if (!ok || strlen(path) + 1 > name_size) {
        int saved = ok ? ENAMETOOLONG : errno;
        close(*controller);
        close(*device);
        errno = saved;
        return -1;
    }
    memcpy(name, path, strlen(path) + 1);
    return 0;
}

int vigil_serial_modem_counters(int fd, vigil_modem_counters *counters) {
    struct serial_icounter_struct icount;
    memset(&icount, 0, sizeof icount);
    if (ioctl(fd, TIOCGICOUNT, &icount) != 0) return -1;
    counters->cts = icount.cts;
    counters->dsr = icount.dsr;
    counters->rng = icount.rng;
    counters->dcd = icount.dcd;
    return 0;
}

int vigil_serial_get_rs485(int fd, vigil_rs485 *settings) {
    struct serial_rs485 rs485;
    memset(&rs485, 0, sizeof rs485);
    if (ioctl(fd, TIOCGRS485, &rs485) != 0) return -1;
    settings->flags = rs485.flags;
    settings->delay_rts_before_send = rs485.delay_rts_before_send;
    settings->delay_rts_after_send = rs485.delay_rts_after_send;
    return 0;
}

int vigil_serial_set_rs485(int fd, vigil_rs485 *settings) {
    struct serial_rs485 rs485;
    memset(&rs485, 0, sizeof rs485);
    rs485.flags = settings->flags;
    rs485.delay_rts_before_send = settings->delay_rts_before_send;
    rs485.delay_rts_after_send = settings->delay_rts_after_send;
    if (ioctl(fd, TIOCSRS485, &rs485) != 0) return -1;
    settings->flags = rs485.flags;
    settings->delay_rts_before_send = rs485.delay_rts_before_send;
    settings->delay_rts_after_send = rs485.delay_rts_after_send;
    return 0;
}
