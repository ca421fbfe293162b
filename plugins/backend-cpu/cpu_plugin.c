/*
 * cpu_plugin.c - the one exported symbol of backend-cpu.so: the plugin
 * descriptor (vt/plugin.h). Everything else lives in the vt_cpu_kernels
 * static library, which the backend's tests link directly.
 */
#include "cpu_internal.h"

VT_PLUGIN_EXPORT const vt_plugin_desc *vt_plugin_entry(void);

VT_PLUGIN_EXPORT const vt_plugin_desc *vt_plugin_entry(void) { return vt_cpu_plugin_desc(); }
