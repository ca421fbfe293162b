/*
 * jinja_parse.h - the tokens the chat-template scanner (jinja_scan.c) gives
 * the parser (jinja_parse.c), and the state they share. Not a public header.
 */
#ifndef VT_JINJA_PARSE_H
#define VT_JINJA_PARSE_H

#include "jinja_internal.h"

typedef enum tk {
    T_END, T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_STRING, T_INT, T_FLOAT, T_OP
} tk;

typedef struct token {
    tk k;
    int line;
    const char *s; /* T_TEXT, T_STRING: the text (unescaped), T_NAME, T_OP: the spelling */
    size_t n;
    int64_t i;
    double f;
} token;

typedef struct parser {
    jenv *E;
    token *t;
    size_t n, cap, pos;
    const char *src, *lpos; /* line_of's memory: the line of lpos */
    int lline;
    int depth;              /* nested expressions and blocks being parsed */
} parser;

/* append t to P's tokens (in the arena) */
void jinja_push(parser *P, token t);
/* the template src[0, len) into P's tokens, ending with T_END; errors through jv_fail */
void jinja_scan(parser *P, const char *src, size_t len);

#endif
