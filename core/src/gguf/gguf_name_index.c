/*
 * gguf_name_index.c - the GGUF reader's name -> index table (metadata keys of
 * one shard, tensor names of all shards): open addressing, load <= 1/2.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "gguf_internal.h"

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void gguf_name_index_free(name_index *ix)
{
    free(ix->names);
    free(ix->idx);
    memset(ix, 0, sizeof *ix);
}

/* Make room for n entries (load <= 1/2). Returns false on allocation failure. */
bool gguf_name_index_reserve(name_index *ix, uint64_t n)
{
    uint64_t cap = 16;
    while (cap < 2 * n + 2) cap *= 2;
    if (cap <= ix->cap) return true;
    const char **names = calloc(cap, sizeof *names);
    int64_t *idx = calloc(cap, sizeof *idx);
    if (!names || !idx) {
        free(names);
        free(idx);
        vt_set_error_oom(cap * (sizeof *names + sizeof *idx), "name index of %" PRIu64 " slots",
                         cap);
        return false;
    }
    for (uint64_t i = 0; i < ix->cap; i++) {
        if (!ix->names[i]) continue;
        uint64_t h = name_hash(ix->names[i]) & (cap - 1);
        while (names[h]) h = (h + 1) & (cap - 1);
        names[h] = ix->names[i];
        idx[h] = ix->idx[i];
    }
    free(ix->names);
    free(ix->idx);
    ix->names = names;
    ix->idx = idx;
    ix->cap = cap;
    return true;
}

int64_t gguf_name_index_find(const name_index *ix, const char *name)
{
    if (!ix->cap || !name) return -1;
    uint64_t h = name_hash(name) & (ix->cap - 1);
    while (ix->names[h]) {
        if (!strcmp(ix->names[h], name)) return ix->idx[h];
        h = (h + 1) & (ix->cap - 1);
    }
    return -1;
}

/* Insert; returns the index already stored under name, or -1 when inserted.
 * The table must have been reserved for the final count. */
int64_t gguf_name_index_insert(name_index *ix, const char *name, int64_t i)
{
    uint64_t h = name_hash(name) & (ix->cap - 1);
    while (ix->names[h]) {
        if (!strcmp(ix->names[h], name)) return ix->idx[h];
        h = (h + 1) & (ix->cap - 1);
    }
    ix->names[h] = name;
    ix->idx[h] = i;
    return -1;
}

