/*
 * gguf_info.h - what `vt info -m MODEL` prints about a GGUF model: its files,
 * metadata, tensor table and byte totals (dense weights vs routed experts, and
 * per tensor type). Reads only what vt_gguf_open parsed; touches no tensor data.
 */
#ifndef VT_GGUF_INFO_H
#define VT_GGUF_INFO_H

#include <stdio.h>

#include "vt/gguf.h"
#include "vt/status.h"

/*
 * Print the whole report to f, in sections:
 *   "-- files --"      one line per shard: index, path, bytes, data section start, tensors
 *   "-- metadata (key : type : value) --"
 *                      one line per key of shard 0: `key : TYPE : value`; arrays as
 *                      `key : ARRAY[ELEM] len=N : [first elements, ...]` (vt_gguf_kv_print)
 *   "-- tensors: name | type | ne | n_elements | n_bytes | shard | offset --"
 *                      one line per tensor: `name | TYPE | ne=[a, b] | n_el | n_bytes |
 *                      shard | offset`; shard is the 0-based shard index, offset is
 *                      relative to that shard's data section (gguf.md §2.3)
 *   "-- totals --"     dense vs routed experts (tensors whose name contains "_exps"),
 *                      each line ending in its effective bits per weight (8 x bytes / elements):
 *                      tensors, elements, bytes; then one line per tensor type.
 * Errors: VT_ERR_IO when writing to f fails (message names the failure).
 */
vt_status vt_gguf_print_info(const vt_gguf *g, FILE *f);

/*
 * True when t is a stack of routed experts: its name contains "_exps" (gguf.md
 * §8.3) and it is 3-D [.., .., n_expert], the kind of tensor the expert
 * streamer serves. Per-expert vectors such as gemma4's ffn_down_exps.scale
 * [n_expert] count with the dense weights.
 */
int vt_gguf_is_routed_expert(const vt_gguf_tensor *t);

#endif
