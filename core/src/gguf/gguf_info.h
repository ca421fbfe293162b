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

/* The block index N of a tensor named "blk.N....", or -1 for another name. */
long vt_gguf_block_of(const char *name);

/*
 * The first block no model runs: block_count − nextn_predict_layers of
 * general.architecture, the multi-token-prediction blocks at the end of
 * Qwen3.5/3.6 (and DeepSeek-style) files, which the qwen35 plugin skips
 * without loading anything of them; LONG_MAX when the file has none (no such
 * key, 0, or not below block_count). The fit check and `vt bench`'s bytes
 * per token leave tensors of blocks >= it out. A model plugin that ran MTP
 * blocks would need the fit to count them again.
 */
long vt_gguf_first_unrun_block(const vt_gguf *g);

#endif
