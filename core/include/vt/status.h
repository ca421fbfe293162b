/*
 * vt/status.h - status codes shared by the core and every plugin.
 *
 * Functions of the core and of plugin tables return a vt_status. VT_OK is 0;
 * every failure is negative. The human-readable reason of the last failure on
 * the calling thread is kept by the core (vt_last_error() in the core,
 * host->set_error() from a plugin) and always names the thing that failed:
 * a file, a metadata key, a tensor, an allocation and its byte count.
 */
#ifndef VT_STATUS_H
#define VT_STATUS_H

typedef enum vt_status {
    VT_OK = 0,
    VT_ERR_INVALID_ARG = -1,   /* a caller passed something unusable */
    VT_ERR_IO = -2,            /* open/read/mmap failed (errno in the message) */
    VT_ERR_FORMAT = -3,        /* a file is malformed: truncated, hostile, wrong magic */
    VT_ERR_NOT_FOUND = -4,     /* a key, tensor, plugin or file does not exist */
    VT_ERR_OUT_OF_MEMORY = -5, /* an allocation failed (message: what and how many bytes) */
    VT_ERR_UNSUPPORTED = -6,   /* valid input that this build/plugin does not handle */
    VT_ERR_ABI = -7,           /* a plugin's ABI does not match the core's */
    VT_ERR_CAPABILITY = -8,    /* a required capability is ABSENT */
    VT_ERR_RANGE = -9,         /* a value is outside what the field allows */
    VT_ERR_INTERNAL = -10,     /* a bug: an invariant of vt itself did not hold */
    VT_ERR_DOES_NOT_FIT = -11  /* the resolved residency does not fit the device's memory */
} vt_status;

#endif
