// libdbus-1, the reference D-Bus implementation (BlueZ's API is on the system bus).
// A header of our own so the module map does not hard-code a system path, and
// so the macros Swift cannot import (type codes, flags, timeouts) become
// constants it can.
#ifndef CDBUS_SHIM_H
#define CDBUS_SHIM_H

#include <dbus/dbus.h>

// Type codes (the signature characters), as ints like dbus_message_iter_get_arg_type returns.
static const int CDBUS_TYPE_INVALID = DBUS_TYPE_INVALID;
static const int CDBUS_TYPE_BYTE = DBUS_TYPE_BYTE;
static const int CDBUS_TYPE_BOOLEAN = DBUS_TYPE_BOOLEAN;
static const int CDBUS_TYPE_INT16 = DBUS_TYPE_INT16;
static const int CDBUS_TYPE_UINT16 = DBUS_TYPE_UINT16;
static const int CDBUS_TYPE_INT32 = DBUS_TYPE_INT32;
static const int CDBUS_TYPE_UINT32 = DBUS_TYPE_UINT32;
static const int CDBUS_TYPE_INT64 = DBUS_TYPE_INT64;
static const int CDBUS_TYPE_UINT64 = DBUS_TYPE_UINT64;
static const int CDBUS_TYPE_DOUBLE = DBUS_TYPE_DOUBLE;
static const int CDBUS_TYPE_STRING = DBUS_TYPE_STRING;
static const int CDBUS_TYPE_OBJECT_PATH = DBUS_TYPE_OBJECT_PATH;
static const int CDBUS_TYPE_SIGNATURE = DBUS_TYPE_SIGNATURE;
static const int CDBUS_TYPE_UNIX_FD = DBUS_TYPE_UNIX_FD;
static const int CDBUS_TYPE_ARRAY = DBUS_TYPE_ARRAY;
static const int CDBUS_TYPE_VARIANT = DBUS_TYPE_VARIANT;
static const int CDBUS_TYPE_STRUCT = DBUS_TYPE_STRUCT;
static const int CDBUS_TYPE_DICT_ENTRY = DBUS_TYPE_DICT_ENTRY;

// Message types.
static const int CDBUS_MESSAGE_TYPE_METHOD_CALL = DBUS_MESSAGE_TYPE_METHOD_CALL;
static const int CDBUS_MESSAGE_TYPE_METHOD_RETURN = DBUS_MESSAGE_TYPE_METHOD_RETURN;
static const int CDBUS_MESSAGE_TYPE_ERROR = DBUS_MESSAGE_TYPE_ERROR;
static const int CDBUS_MESSAGE_TYPE_SIGNAL = DBUS_MESSAGE_TYPE_SIGNAL;

// Watch flags (dbus_watch_get_flags / dbus_watch_handle).
static const unsigned int CDBUS_WATCH_READABLE = DBUS_WATCH_READABLE;
static const unsigned int CDBUS_WATCH_WRITABLE = DBUS_WATCH_WRITABLE;
static const unsigned int CDBUS_WATCH_ERROR = DBUS_WATCH_ERROR;
static const unsigned int CDBUS_WATCH_HANGUP = DBUS_WATCH_HANGUP;

// Dispatch status and filter results.
static const int CDBUS_DISPATCH_DATA_REMAINS = DBUS_DISPATCH_DATA_REMAINS;
static const int CDBUS_DISPATCH_COMPLETE = DBUS_DISPATCH_COMPLETE;
static const int CDBUS_DISPATCH_NEED_MEMORY = DBUS_DISPATCH_NEED_MEMORY;
static const int CDBUS_HANDLER_RESULT_HANDLED = DBUS_HANDLER_RESULT_HANDLED;
static const int CDBUS_HANDLER_RESULT_NOT_YET_HANDLED = DBUS_HANDLER_RESULT_NOT_YET_HANDLED;

static const int CDBUS_TIMEOUT_USE_DEFAULT = DBUS_TIMEOUT_USE_DEFAULT;
static const int CDBUS_TIMEOUT_INFINITE = DBUS_TIMEOUT_INFINITE;

// RequestName flags and replies.
static const unsigned int CDBUS_NAME_FLAG_ALLOW_REPLACEMENT = DBUS_NAME_FLAG_ALLOW_REPLACEMENT;
static const unsigned int CDBUS_NAME_FLAG_REPLACE_EXISTING = DBUS_NAME_FLAG_REPLACE_EXISTING;
static const unsigned int CDBUS_NAME_FLAG_DO_NOT_QUEUE = DBUS_NAME_FLAG_DO_NOT_QUEUE;
static const unsigned int CDBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER = DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER;
static const unsigned int CDBUS_REQUEST_NAME_REPLY_IN_QUEUE = DBUS_REQUEST_NAME_REPLY_IN_QUEUE;
static const unsigned int CDBUS_REQUEST_NAME_REPLY_EXISTS = DBUS_REQUEST_NAME_REPLY_EXISTS;
static const unsigned int CDBUS_REQUEST_NAME_REPLY_ALREADY_OWNER = DBUS_REQUEST_NAME_REPLY_ALREADY_OWNER;

#endif
