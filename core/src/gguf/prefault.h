/*
 * prefault.h - reading a model's mapped weights into memory at load, so that
 * the first prompt does not wait for the file (engine.c, on a backend that
 * reads the weights in place from the mapping: one that declares
 * host-addressable device memory, today the CPU).
 *
 * The bytes read are those of the tensors a model reads in place: every
 * tensor of the blocks that run (gguf_info.h's vt_gguf_first_unrun_block:
 * MTP blocks are never read), less the routed experts when they are
 * streamed (the streamer preads them into its slots). Ranges are rounded out
 * to whole pages and merged; each is read with madvise(MADV_POPULATE_READ)
 * (Linux 5.14) where the kernel has it, else by touching one byte per page
 * after MADV_WILLNEED. The effect is the one llama.cpp gets from MAP_POPULATE
 * on its mapping: the file is read before the first token, not during it.
 */
#ifndef VT_PREFAULT_H
#define VT_PREFAULT_H

#include <stdint.h>

#include "vt/gguf.h"
#include "vt/status.h"

/*
 * Read the mapped bytes of g's in-place tensors (skip_experts: routed
 * experts left out) into memory, reporting bytes to progress after each
 * chunk of at most 64 MiB. g must be mapped (vt_gguf_map). *bytes (may be
 * NULL) gets the bytes read (page-rounded). Errors: VT_ERR_IO naming the
 * file and the byte range when the file cannot give them (EFAULT: shorter
 * than its tensor table says, or EIO); VT_ERR_OUT_OF_MEMORY (the range
 * table). Any other refusal of the kernel (ENOMEM, EPERM, ...) is a WARN
 * naming the file: reading ahead is a speed-up, so the rest is left to first
 * use and the call returns VT_OK (the report ends at done == total, *bytes
 * says what was read). Where the kernel lacks MADV_POPULATE_READ, pages are
 * touched one by one: a file cut short after it was opened then raises
 * SIGBUS, which vt's handler (gguf_guard.h) reports, naming the file and
 * the tensor, before the process ends. progress may be NULL.
 */
vt_status vt_prefault_weights(const vt_gguf *g, int skip_experts, vt_gguf_progress_fn progress,
                              void *user, uint64_t *bytes);

#endif
