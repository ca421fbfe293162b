/*
 * serve_json.h - cJSON's allocations under watch, so that a response built
 * while memory ran out is never sent half-made.
 *
 * cJSON's builders (cJSON_AddStringToObject, cJSON_CreateObject, ...) return
 * NULL when an allocation fails, and the object they were adding to simply
 * lacks the member: an SSE event without its "content" would still print and
 * go out, losing text without a word. vt_serve_json_init installs
 * allocation hooks (cJSON_InitHooks, process-wide) that count failures per
 * thread; every formatter of vt serve (the scheduler's events and bodies,
 * the HTTP endpoints' answers) takes vt_serve_json_failures() before
 * building and compares after, and on a difference sends an error instead.
 */
#ifndef VT_SERVE_JSON_H
#define VT_SERVE_JSON_H

/* Install the counting hooks (idempotent, thread-safe). */
void vt_serve_json_init(void);
/* cJSON allocations that failed on the calling thread since it started. */
unsigned long vt_serve_json_failures(void);
/* Tests: make the allocation after the next n cJSON allocations of any
 * thread fail, once (n >= 0); -1 disarms. Returns the countdown it replaced:
 * >= 0 when a fault was armed and has not fired, else -1. */
long vt_serve_json_fail_after(long n);

#endif
