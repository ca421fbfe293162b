/*
 * capabilities.h - the capability ids this core's ABI knows, their names, the
 * ABI minor that introduced each, and the checks the registry and the
 * configuration resolver run on a backend's declarations.
 */
#ifndef VT_CAPABILITIES_H
#define VT_CAPABILITIES_H

#include <stddef.h>
#include <stdint.h>

#include "vt/backend.h"
#include "vt/model.h"
#include "vt/store.h"

/* Table sizes each ABI minor requires (append-only tables): frozen at the
 * last member of that minor, so appending members later does not make older
 * plugins "too small". */
#define VT_BACKEND_API_SIZE_1_0 (offsetof(vt_backend_api, softmax_topk) + sizeof(void *))
#define VT_BACKEND_API_SIZE_1_1 (offsetof(vt_backend_api, device_name) + sizeof(void *))
#define VT_BACKEND_API_SIZE_1_2 (offsetof(vt_backend_api, copy_rows_dpos) + sizeof(void *))
#define VT_BACKEND_API_SIZE_1_3 (offsetof(vt_backend_api, delta_net_gates) + sizeof(void *))
#define VT_BACKEND_API_SIZE_1_4 (offsetof(vt_backend_api, copy_h2d_async) + sizeof(void *))
#define VT_BACKEND_API_SIZE_1_5 (offsetof(vt_backend_api, ahead_join) + sizeof(void *))
#define VT_BACKEND_API_SIZE_1_9 (offsetof(vt_backend_api, get_rows_ext) + sizeof(void *))
#define VT_MODEL_API_SIZE_1_0 (offsetof(vt_model_api, forward) + sizeof(void *))
#define VT_MODEL_API_SIZE_1_1 (offsetof(vt_model_api, memory_needs) + sizeof(void *))
#define VT_MODEL_API_SIZE_1_8 (offsetof(vt_model_api, forward_multi) + sizeof(void *))
#define VT_STORE_API_SIZE_1_1 (offsetof(vt_store_api, slot_for_read) + sizeof(void *))
#define VT_STORE_API_SIZE_1_4 (offsetof(vt_store_api, quiesce) + sizeof(void *))
#define VT_STORE_API_SIZE_1_5 (offsetof(vt_store_api, join_ahead) + sizeof(void *))

/* The table size a plugin's declared minor requires, for kind; 0 = kind unknown
 * for that minor (a store plugin declaring minor 0). */
size_t vt_abi_table_size(uint32_t kind, uint16_t minor);
#define VT_PLUGIN_DESC_SIZE_1_0 (offsetof(vt_plugin_desc, table) + sizeof(void *))

/* Name of a capability id ("memory_probe", "mat_mul.Q8_0"); writes into buf. */
const char *vt_cap_name(uint32_t id, char *buf, size_t cap);
/* Whether id is a capability of this ABI, and the minor that introduced it. */
int vt_cap_known(uint32_t id, uint16_t *minor);

/* Calls fn(id, arg) for every capability id this ABI knows, in increasing
 * order (the fixed ids, the weight-typed ids of every named type, then the
 * extended weight-typed ids of ABI 1.9). */
void vt_cap_for_each(void (*fn)(uint32_t id, void *arg), void *arg);

/* Validate a backend descriptor's capability list (registry load check). */
vt_status vt_caps_validate(const vt_plugin_desc *d, char *why, size_t why_cap);

/* State of capability id for a validated backend: VT_CAP_PRESENT or
 * VT_CAP_ABSENT, with *reason set for ABSENT (never NULL). */
vt_cap_state vt_caps_state(const vt_plugin_desc *d, uint32_t id, const char **reason);

#endif
