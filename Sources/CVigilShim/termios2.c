// Arbitrary baud rates (BOTHER) need struct termios2 and TCGETS2/TCSETS2
// from <asm/termbits.h>, which cannot share a file with glibc's <termios.h>
// (both define struct termios): hence a file of their own.
#include "CVigilShim.h"

#include <asm/ioctls.h>
#include <asm/termbits.h>

int ioctl(int fd, unsigned long request, ...);

int vigil_serial_set_speed(int fd, unsigned int rate) {
    struct termios2 settings;
    if (ioctl(fd, TCGETS2, &settings) != 0) return -1;
    settings.c_cflag &= ~(CBAUD | (CBAUD << IBSHIFT));
    settings.c_cflag |= BOTHER | (BOTHER << IBSHIFT);
    settings.c_ispeed = rate;
    settings.c_ospeed = rate;
    return ioctl(fd, TCSETS2, &settings);
}

int vigil_serial_get_speed(int fd, unsigned int *rate) {
    struct termios2 settings;
    if (ioctl(fd, TCGETS2, &settings) != 0) return -1;
    *rate = settings.c_ospeed;
    return 0;
}
