// hidraw ioctls: their request numbers are macros of <linux/hidraw.h> built
// from the length (_IOC), which Swift cannot import.
#include "CVigilShim.h"

#include <errno.h>
#include <linux/hidraw.h>
#include <string.h>
#include <sys/ioctl.h>

int vigil_hidraw_descriptor(int fd, unsigned char *buffer, size_t capacity) {
    int size = 0;
    if (ioctl(fd, HIDIOCGRDESCSIZE, &size) != 0) return -1;
    struct hidraw_report_descriptor descriptor;
    memset(&descriptor, 0, sizeof descriptor);
    descriptor.size = (__u32)size;
    if (ioctl(fd, HIDIOCGRDESC, &descriptor) != 0) return -1;
    if ((size_t)size > capacity) {
        errno = EMSGSIZE;
        return -1;
    }
    memcpy(buffer, descriptor.value, (size_t)size);
    return size;
}

int vigil_hidraw_info(int fd, unsigned int *bustype, short *vendor, short *product) {
    struct hidraw_devinfo info;
    memset(&info, 0, sizeof info);
    if (ioctl(fd, HIDIOCGRAWINFO, &info) != 0) return -1;
    *bustype = info.bustype;
    *vendor = info.vendor;
    *product = info.product;
    return 0;
}

int vigil_hidraw_get_feature(int fd, unsigned char *buffer, size_t length) {
    return ioctl(fd, HIDIOCGFEATURE(length), buffer);
}

int vigil_hidraw_set_feature(int fd, const unsigned char *buffer, size_t length) {
    return ioctl(fd, HIDIOCSFEATURE(length), buffer);
}
