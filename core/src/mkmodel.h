/*
 * mkmodel.h - generator of small random-weight demo models in GGUF form, so
 * that vt can be tried (and tested) without downloading a model.
 *
 * vt_mkmodel_qwen35moe writes a qwen35moe model (spec/qwen35moe.md §3 keys,
 * §4 tensors) shaped like the qwen35moe-tiny fixture by default, with a
 * byte-level BPE tokenizer (spec/tokenizers.md §4) trained at generation time
 * on a small embedded English text. Weights are deterministic for a given seed
 * and parameter set; they are random, so the model's text is gibberish, but
 * every code path of the qwen35moe plugin (linear + full attention, MoE with a
 * shared expert) runs on it.
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
    uint32_t weight_type;        /* VT_TYPE_F32 or VT_TYPE_BF16 for the matrices (BF16) */
    uint64_t seed;               /* weight RNG seed (1234) */
    const char *name;            /* general.name ("vt demo qwen35moe") */
    int sparse;                  /* 1: matrices are zeros written as holes (a sparse file):
                                    the tensor table of a huge model for fit/residency tests
                                    at no disk cost; the model computes nothing useful (0) */
} vt_mkmodel_params;

/* Fill p with the defaults above (the qwen35moe-tiny fixture's shape). */
void vt_mkmodel_defaults(vt_mkmodel_params *p);

/* Set p->weight_type from a name: "f32" or "bf16" (case-insensitive).
 * Errors: VT_ERR_INVALID_ARG naming the value. */
vt_status vt_mkmodel_set_type(vt_mkmodel_params *p, const char *name);

/*
 * Write the model to path (p = NULL: defaults). Matrices are weight_type;
 * norms, ssm_a, ssm_dt.bias, ssm_conv1d and the two router tensors are F32 as
 * in converter-made files. Norm weights are near 1 (the converter's "+1"
 * already applied, §4.6), ssm_a = -exp(A_log) < 0, ssm_norm near 1.
 * Tokenizer: tokenizer.ggml.model "gpt2", pre "qwen35"; tokens = the 256
 * GPT-2 byte symbols in byte order, then one token per learned merge, then
 * <|endoftext|>, <|im_start|>, <|im_end|> (CONTROL); eos = <|im_end|>,
 * padding = <|endoftext|>; a ChatML chat template.
 * Errors: VT_ERR_INVALID_ARG for an inconsistent shape (message names the
 * parameter), VT_ERR_IO / VT_ERR_OUT_OF_MEMORY from writing.
 */
vt_status vt_mkmodel_qwen35moe(const char *path, const vt_mkmodel_params *p);

#endif
