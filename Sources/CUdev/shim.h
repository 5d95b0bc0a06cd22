// libudev, the device database and hot-plug events that udevd maintains.
// A header of our own so the module map does not hard-code a system path.
#ifndef CUDEV_SHIM_H
#define CUDEV_SHIM_H

#include <libudev.h>

#endif
