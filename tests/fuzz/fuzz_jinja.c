/*
 * fuzz_jinja.c - libFuzzer target for the chat-template interpreter
 * (vt_jinja_render, core/src/text/jinja*.c), seeded with the published
 * templates of tests/jinja. Built only with -DVT_FUZZ=ON; fuzz_replay_
 * fuzz_jinja replays the seeds in every build (test fuzz_seed_replay).
 *
 * Input: the template's bytes. The variables are one conversation with a
 * system turn, a user turn, an assistant tool call with nested arguments,
 * a tool result and a tool definition, so that the templates' branches for
 * tools run. Tight limits (steps, output, memory, depth) keep each input
 * fast. Checks (each failure aborts, which libFuzzer reports): the status is
 * VT_OK with a NUL-terminated output of the length returned, or
 * VT_ERR_FORMAT / VT_ERR_RANGE with a message and no output; never a crash,
 * leak or sanitizer report.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "jinja.h"

#define CHECK(c)                                                                       \
    do {                                                                               \
        if (!(c)) {                                                                    \
            fprintf(stderr, "fuzz_jinja: check failed: %s (line %d)\n", #c, __LINE__); \
            abort();                                                                   \
        }                                                                              \
    } while (0)

static const char VARS[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
    "\"content\": [{\"type\": \"text\", \"text\": \"Weather in Paris?\"}]}, {\"role\": "
    "\"assistant\", \"content\": \"\", \"reasoning_content\": \"Use the tool.\", \"tool_calls\": "
    "[{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"arguments\": {\"city\": \"Paris\", \"days\": [1, 2.5, null, true]}}}]}, {\"role\": \"tool\", "
    "\"tool_call_id\": \"c1\", \"content\": \"21C\"}], \"tools\": [{\"type\": \"function\", "
    "\"function\": {\"name\": \"get_weather\", \"description\": \"d\", \"parameters\": {\"type\": "
    "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"array\", "
    "\"items\": {\"type\": \"number\"}}}, \"required\": [\"city\"]}}}], \"add_generation_prompt\": "
    "true, \"enable_thinking\": false, \"bos_token\": \"<bos>\", \"eos_token\": \"<eos>\"}";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vt_jinja_limits lim = {.max_output = 1 << 20, .max_memory = 64 << 20, .max_depth = 100,
                           .max_steps = 100000};
    char *out = NULL;
    size_t n = 0;
    vt_status st = vt_jinja_render((const char *)data, size, VARS, sizeof VARS - 1, &lim, &out, &n);
    if (st == VT_OK) {
        CHECK(out != NULL);
        CHECK(strlen(out) == n || memchr(out, 0, n) != NULL); /* a template may print a NUL */
        CHECK(out[n] == 0);
    } else {
        CHECK(out == NULL);
        CHECK(st == VT_ERR_FORMAT || st == VT_ERR_RANGE);
        CHECK(vt_last_error()[0] != 0);
    }
    free(out);
    return 0;
}
