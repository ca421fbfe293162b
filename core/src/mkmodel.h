/*
 * mkmodel.h - generator of random-weight qwen35moe models of any shape in GGUF
 * form, so that vt can be tried (and tested, and benchmarked at scale) without
 * downloading a model.
 *
 * vt_mkmodel_qwen35moe writes a qwen35moe model (spec/qwen35moe.md §3 keys,
 * §4 tensors) shaped like the qwen35moe-tiny fixture by default, with a
 * byte-level BPE tokenizer (spec/tokenizers.md §4) trained at generation time
 * on a small embedded English text. Any shape the model plugin accepts can be
 * asked for (embedding, layers, experts, top-k, FFN widths, heads, ...), with
 * F32, F16, BF16 or Q8_0 matrices, as one file or a split model of n_shards
 * files (gguf.md §5). Weights are deterministic for a given seed and parameter
 * set (and independent of n_threads); they are random, so the model's text is
 * gibberish, but every code path of the qwen35moe plugin (linear + full
 * attention, MoE with a shared expert) runs on it. Generation streams (data is
 * produced while the file is written): memory use stays at a few MiB whatever
 * the model size.
 */
#ifndef VT_MKMODEL_H
#define VT_MKMODEL_H

#include <stdint.h>

#include "vt/status.h"

typedef struct vt_mkmodel_params {
    uint32_t n_embd;             /* embedding_length (256) */
    uint32_t n_layer;            /* block_count (4); layer il is full attention iff (il+1) % full_attention_interval == 0 */
    uint32_t full_attention_interval; /* (4) */
    uint32_t n_head;             /* full-attention query heads (4) */
    uint32_t n_head_kv;          /* (2) */
    uint32_t head_dim;           /* attention.key_length = value_length (64) */
    uint32_t n_rot;              /* rope.dimension_count (16), even, <= head_dim */
    uint32_t n_expert;           /* expert_count (8) */
    uint32_t n_expert_used;      /* expert_used_count (2) */
    uint32_t n_ff_exp;           /* expert_feed_forward_length (256) */
    uint32_t n_ff_shexp;         /* expert_shared_feed_forward_length (256) */
    uint32_t ssm_d_conv;         /* ssm.conv_kernel (4) */
    uint32_t ssm_d_k;            /* ssm.state_size = d_k = d_v (64) */
    uint32_t ssm_n_k;            /* ssm.group_count: linear key heads (2) */
    uint32_t ssm_n_v;            /* ssm.time_step_rank: linear value heads (4), multiple of n_k */
    uint32_t context_length;     /* (4096) */
    uint32_t n_merges;           /* BPE merges to learn, at most (400); vocab = 256 + merges + 3 */
    uint32_t weight_type;        /* matrices: VT_TYPE_F32, F16, BF16 or Q8_0 (BF16); Q8_0
                                    needs every matrix row length (n_embd, n_ff_exp,
                                    n_ff_shexp, ssm_n_v*ssm_d_k, n_head*head_dim) % 32 == 0 */
    uint64_t seed;               /* weight RNG seed (1234) */
    const char *name;            /* general.name ("vt demo qwen35moe") */
    int sparse;                  /* 1: matrices are zeros written as holes (a sparse file):
                                    the tensor table of a huge model for fit/residency tests
                                    at no disk cost; the model computes nothing useful (0) */
    uint32_t n_shards;           /* 1: one file at path; N > 1: a split model of N files
                                    named by vt_gguf_writer_shard_path(path, k, N) (vt/gguf.h):
                                    "X.gguf" -> "X-00001-of-0000N.gguf" ..., whole tensors
                                    spread by bytes; open the first. 0 counts as 1 (1) */
    uint32_t n_threads;          /* generator threads, 0 = every online CPU (at most 16) (0) */
    uint32_t n_vocab;            /* vocabulary padded to this many tokens with UNUSED
                                    "<|pad_N|>" tokens (real model sizes: 248320 for
                                    Qwen3.5); 0 or less than the learned vocab: no padding */
} vt_mkmodel_params;

/* Fill p with the defaults above (the qwen35moe-tiny fixture's shape). */
void vt_mkmodel_defaults(vt_mkmodel_params *p);

/* Set p->weight_type from a name: "f32", "f16", "bf16" or "q8_0"
 * (case-insensitive). Errors: VT_ERR_INVALID_ARG naming the value. */
vt_status vt_mkmodel_set_type(vt_mkmodel_params *p, const char *name);

/*
 * Write the model to path (p = NULL: defaults), or its n_shards shards (path
 * names the model; see n_shards). Matrices are weight_type; norms, ssm_a,
 * ssm_dt.bias, ssm_conv1d and the two router tensors are F32 as in
 * converter-made files (general.file_type: 0 F32, 1 F16, 32 BF16, 7 Q8_0).
 * Matrix [n_in, n_out(, n_expert)] values are approximately normal with mean
 * 0 and std 1/sqrt(n_in) (unit-scale outputs); token_embd std 1. Norm weights
 * are near 1 (the converter's "+1" already applied, §4.6), ssm_a =
 * -exp(A_log) < 0, ssm_norm near 1. F16 and BF16 are rounded to nearest even;
 * Q8_0 blocks as llama.cpp's reference quantiser makes them (d = amax/127
 * stored as F16, q = round(x / d)).
 * Tokenizer: tokenizer.ggml.model "gpt2", pre "qwen35"; tokens = the 256
 * GPT-2 byte symbols in byte order, then one token per learned merge, then
 * <|endoftext|>, <|im_start|>, <|im_end|> (CONTROL); eos = <|im_end|>,
 * padding = <|endoftext|>; a ChatML chat template.
 * Errors: VT_ERR_INVALID_ARG for an inconsistent shape or a Q8_0 row length
 * that is not a multiple of 32 (message names the parameter), or more shards
 * than tensors; VT_ERR_IO / VT_ERR_OUT_OF_MEMORY from writing (no partial
 * output file is left).
 */
vt_status vt_mkmodel_qwen35moe(const char *path, const vt_mkmodel_params *p);

#endif
