/*
 * mkmodel.h - generator of random-weight qwen35moe and gemma4 models of any
 * shape in GGUF form, so that vt can be tried (and tested, and benchmarked at scale) without
 * downloading a model.
 *
 * vt_mkmodel_qwen35moe writes a qwen35moe model (spec/qwen35moe.md §3 keys,
 * §4 tensors) shaped like the qwen35moe-tiny fixture by default, with a
 * byte-level BPE tokenizer (spec/tokenizers.md §4) trained at generation time
 * on a small embedded English text. Any shape the model plugin accepts can be
 * asked for (embedding, layers, experts, top-k, FFN widths, heads, ...), with
 * matrices in any common GGUF weight type (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL, IQ4_XS, MXFP4, or the Q4_K_M / Q5_K_M mixes;
 * quantize.h says how each is rounded), as one file or a split model of n_shards
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

#include "vt/gguf.h"
#include "vt/status.h"

/* vt_mkmodel_params.weight_mix */
enum {
    VT_MKMODEL_MIX_NONE = 0, /* every matrix weight_type */
    VT_MKMODEL_MIX_K_M = 1,  /* llama.cpp's "_M" recipe, simplified: Q6_K for output.weight
                                and every ffn_down matrix (ffn_down_exps, ffn_down_shexp,
                                gemma4's ffn_down), weight_type (Q4_K or Q5_K) elsewhere */
    VT_MKMODEL_MIX_UD = 2    /* shaped like unsloth's "dynamic" files: routed experts'
                                gate/up weight_type and down exps_down_type, attention
                                Q5_K, DeltaNet (attn_qkv, attn_gate, ssm_*) Q4_K, shared
                                experts and dense FFNs Q5_K, output Q6_K, token_embd Q4_K */
};

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
    uint32_t weight_type;        /* matrices (token_embd included): VT_TYPE_F32, F16, BF16,
                                    Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K,
                                    Q6_K, IQ4_NL, IQ4_XS or MXFP4 (BF16). A 32-value block
                                    type needs every matrix row length (n_embd, n_ff_exp,
                                    n_ff_shexp, ssm_n_v*ssm_d_k, n_head*head_dim, ...) % 32
                                    == 0; a 256-value type takes llama.cpp's fallback for a
                                    row that is not (vt_quantize_fallback: Q4_K -> Q5_0,
                                    Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K/IQ4_XS -> IQ4_NL,
                                    then F16 for a row not % 32), logged at INFO */
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
    uint32_t n_nextn;            /* qwen35moe: MTP blocks after the n_layer main ones
                                    (nextn_predict_layers; block_count n_layer + n_nextn):
                                    full attention, routed and shared experts and the
                                    nextn.* tensors, which vt loads but never runs; their
                                    routed experts are Q2_K under the ud-* mixes, as in the
                                    published UD files (0) */
    uint32_t n_vocab;            /* vocabulary padded to this many tokens with UNUSED
                                    "<|pad_N|>" tokens (gemma4: "<unusedN>"; real model
                                    sizes: 248320 for Qwen3.5, 262144 for Gemma 4); 0 or
                                    less than the learned vocab: no padding */
    /* gemma4 only (vt_mkmodel_gemma4; ignored by qwen35moe). There head_dim is the
     * full-attention (F) layers' head dim (attention.key_length), n_head_kv the sliding
     * (S) layers' KV heads, n_rot the F layers' rotated dims (the proportional RoPE of
     * rope_freqs.weight: n_rot/2 entries 1, then 1e30), full_attention_interval the
     * S/F pattern, n_expert 0 a dense model, n_ff_exp the per-expert width. */
    uint32_t head_dim_swa;       /* attention.key_length_swa: S layers' head dim (64) */
    uint32_t n_head_kv_full;     /* F layers' KV heads; 0: = n_head_kv (1; if it differs,
                                    head_count_kv is written as an INT32 per-layer array) */
    uint32_t n_ff;               /* feed_forward_length: dense MLP width (in MoE models the
                                    always-on MLP beside the experts) (256) */
    uint32_t sliding_window;     /* attention.sliding_window (32) */
    uint32_t shared_kv_layers;   /* attention.shared_kv_layers: trailing layers without K/V
                                    of their own (E2B: 20) (0) */
    uint32_t n_per_layer;        /* embedding_length_per_layer_input P: per-layer embedding
                                    width of the E2B/E4B-style dense models (E2B: 256) (0) */
    uint32_t k_eq_v;             /* 1: F layers have no attn_v (V = K, 26B-A4B / 31B) (1) */
    uint32_t double_wide_mlp;    /* 1: feed_forward_length is an array with 2 x n_ff on the
                                    shared-KV layers (E2B) (0) */
    uint32_t weight_mix;         /* VT_MKMODEL_MIX_NONE, VT_MKMODEL_MIX_K_M with
                                    weight_type Q4_K (Q4_K_M) or Q5_K (Q5_K_M), or
                                    VT_MKMODEL_MIX_UD (the ud-* names) (NONE) */
    uint32_t exps_down_type;     /* VT_MKMODEL_MIX_UD: ffn_down_exps' type (set with the mix
                                    by vt_mkmodel_set_type) */
    vt_gguf_progress_fn progress; /* bytes of tensor data written, every shard (vt/gguf.h's
                                    vt_gguf_writer_set_progress); NULL: none (NULL) */
    void *progress_user;
} vt_mkmodel_params;

/* Fill p with the defaults above (the qwen35moe-tiny fixture's shape). */
void vt_mkmodel_defaults(vt_mkmodel_params *p);

/* Fill p with the gemma4 defaults: the gemma4-moe-tiny fixture's shape (n_embd 256,
 * 4 layers S,F,S,F, 4 query heads, KV heads 2 (S) / 1 (F), head dims 64 (S) / 128 (F),
 * n_rot 32, 8 experts top-2 of width 256, MLP 256, window 32, V = K on F layers),
 * BF16, name "vt demo gemma4". */
void vt_mkmodel_defaults_gemma4(vt_mkmodel_params *p);

/* Set p->weight_type and p->weight_mix from a name (case-insensitive): "f32",
 * "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k",
 * "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs", "mxfp4" (that type, mix NONE),
 * or the mixes "q4_k_m", "q5_k_m" (Q4_K / Q5_K with VT_MKMODEL_MIX_K_M).
 * Errors: VT_ERR_INVALID_ARG naming the value. */
vt_status vt_mkmodel_set_type(vt_mkmodel_params *p, const char *name);

/*
 * Write the model to path (p = NULL: defaults), or its n_shards shards (path
 * names the model; see n_shards). Matrices are weight_type; norms, ssm_a,
 * ssm_dt.bias, ssm_conv1d and the two router tensors are F32 as in
 * converter-made files. general.file_type is llama.cpp's LLAMA_FTYPE (gguf.md
 * §7): 0 F32, 1 F16, 32 BF16, 7 Q8_0, 2 Q4_0, 3 Q4_1, 8 Q5_0, 9 Q5_1, 10 Q2_K,
 * 11 Q3_K (Q3_K_S), 14 Q4_K (Q4_K_S), 15 Q4_K_M, 16 Q5_K (Q5_K_S), 17 Q5_K_M,
 * 18 Q6_K, 25 IQ4_NL, 30 IQ4_XS, 38 MXFP4 (MXFP4_MOE).
 * Matrix [n_in, n_out(, n_expert)] values are approximately normal with mean
 * 0 and std 1/sqrt(n_in) (unit-scale outputs); token_embd std 1. Norm weights
 * are near 1 (the converter's "+1" already applied, §4.6), ssm_a =
 * -exp(A_log) < 0, ssm_norm near 1. F16 and BF16 are rounded to nearest even;
 * Q8_0 blocks as llama.cpp's reference quantiser makes them (d = amax/127
 * stored as F16, q = round(x / d)); the other block types round to nearest as
 * quantize.h says.
 * Tokenizer: tokenizer.ggml.model "gpt2", pre "qwen35"; tokens = the 256
 * GPT-2 byte symbols in byte order, then one token per learned merge, then
 * <|endoftext|>, <|im_start|>, <|im_end|> (CONTROL); eos = <|im_end|>,
 * padding = <|endoftext|>; a ChatML chat template.
 * Errors: VT_ERR_INVALID_ARG for an inconsistent shape, an unknown weight
 * type or mix, or a row length that is not a multiple of 32 with a 32-value
 * block type (message names the parameter), or more shards
 * than tensors; VT_ERR_IO / VT_ERR_OUT_OF_MEMORY from writing (no partial
 * output file is left).
 */
vt_status vt_mkmodel_qwen35moe(const char *path, const vt_mkmodel_params *p);

/*
 * Write a gemma4 model (spec/gemma4.md §2 keys, §3 tensors, in the converter's
 * tensor order of the gemma4-moe-tiny fixture) to path (p = NULL: the gemma4
 * defaults), as one file or n_shards shards, streamed like vt_mkmodel_qwen35moe.
 * n_expert > 0: the 26B-A4B form (router, fused ffn_gate_up_exps, per-expert
 * scale, the three extra norms); n_expert 0: dense (31B form, or with
 * n_per_layer > 0, shared_kv_layers and double_wide_mlp the E2B/E4B form with
 * per-layer embeddings). Tied output (no output.weight), layer_output_scale on
 * every layer. Matrices are weight_type; norms, scales, rope_freqs and the
 * router are F32. Norm weights are near 1 and used as stored (§4.1: no +1).
 * Tokenizer: tokenizer.ggml.model "gemma4" (tokenizers.md §1.2, §5): ids 0..16
 * the Gemma specials (<pad> 0, <eos> 1, <bos> 2, <unk> 3, <mask> 4, <|turn> 5,
 * <turn|> 6, ..., the seven USER_DEFINED ones), then the 256 byte tokens <0xHH>,
 * then the characters (space as U+2581), then one token per BPE merge learned
 * from the embedded text; scores -1000; padded to n_vocab with UNUSED
 * "<unusedN>"; a Gemma turn chat template.
 * Errors: as vt_mkmodel_qwen35moe (VT_ERR_INVALID_ARG names the parameter: a
 * row length not a multiple of 32 with a 32-value block type, n_head not a multiple of a KV head
 * count, shared_kv_layers leaving no owner layer of a type, ...).
 */
vt_status vt_mkmodel_gemma4(const char *path, const vt_mkmodel_params *p);

#endif
