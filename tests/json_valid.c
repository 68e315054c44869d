/* The strict JSON validator of json_valid.h: recursive descent over the
 * grammar of RFC 8259, depth-limited. */
#include "json_valid.h"

#include <stdio.h>
#include <string.h>

#include "harness.h"

typedef struct jp {
    const char *s;
    size_t n, i;
    char *why;
    size_t cap;
    int depth;
} jp;

static bool bad(jp *p, const char *what)
{
    snprintf(p->why, p->cap, "%s at offset %zu", what, p->i);
    return false;
}

static void ws(jp *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static bool lit(jp *p, const char *w)
{
    size_t k = strlen(w);
    if (p->n - p->i < k || memcmp(p->s + p->i, w, k))
        return bad(p, "unexpected text");
    p->i += k;
    return true;
}

static bool digits(jp *p)
{
    size_t at = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
        p->i++;
    return p->i > at;
}

static bool number(jp *p)
{
    if (p->s[p->i] == '-')
        p->i++;
    if (p->i < p->n && p->s[p->i] == '0')
        p->i++;
    else if (!digits(p))
        return bad(p, "bad number");
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        if (!digits(p))
            return bad(p, "bad fraction");
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
            p->i++;
        if (!digits(p))
            return bad(p, "bad exponent");
    }
    return true;
}

static bool string(jp *p)
{
    p->i++; /* the opening quote */
    while (p->i < p->n) {
        unsigned char c = (unsigned char)p->s[p->i++];
        if (c == '"')
            return true;
        if (c < 0x20)
            return bad(p, "control character in a string");
        if (c != '\\')
            continue;
        if (p->i >= p->n)
            break;
        c = (unsigned char)p->s[p->i++];
        if (c == 'u') {
            for (int k = 0; k < 4; k++, p->i++)
                if (p->i >= p->n || !strchr("0123456789abcdefABCDEF", p->s[p->i]) || !p->s[p->i])
                    return bad(p, "bad \\u escape");
        } else if (!strchr("\"\\/bfnrt", c) || !c) {
            return bad(p, "bad escape");
        }
    }
    return bad(p, "unterminated string");
}

static bool value(jp *p);

static bool members(jp *p, char close, bool keyed)
{
    p->i++; /* the opening bracket */
    ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        return true;
    }
    for (;;) {
        ws(p);
        if (keyed) {
            if (p->i >= p->n || p->s[p->i] != '"')
                return bad(p, "expected a key");
            if (!string(p))
                return false;
            ws(p);
            if (p->i >= p->n || p->s[p->i] != ':')
                return bad(p, "expected ':'");
            p->i++;
        }
        if (!value(p))
            return false;
        ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == close) {
            p->i++;
            return true;
        }
        return bad(p, keyed ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static bool value(jp *p)
{
    ws(p);
    if (p->i >= p->n)
        return bad(p, "expected a value");
    if (++p->depth > 64)
        return bad(p, "nested too deep");
    bool ok;
    char c = p->s[p->i];
    if (c == '{')
        ok = members(p, '}', true);
    else if (c == '[')
        ok = members(p, ']', false);
    else if (c == '"')
        ok = string(p);
    else if (c == 't')
        ok = lit(p, "true");
    else if (c == 'f')
        ok = lit(p, "false");
    else if (c == 'n')
        ok = lit(p, "null");
    else if (c == '-' || (c >= '0' && c <= '9'))
        ok = number(p);
    else
        ok = bad(p, "expected a value");
    p->depth--;
    return ok;
}

bool herd_test_json_valid(const char *s, size_t len, char *why, size_t cap)
{
    jp p = {s, len, 0, why, cap, 0};
    if (!value(&p))
        return false;
    ws(&p);
    return p.i == p.n || bad(&p, "text after the value");
}

size_t herd_test_json_lines(const char *text, const char *what)
{
    size_t lines = 0;
    for (const char *l = text; *l;) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        char why[128];
        if (len == 0 || l[0] != '{' || !herd_test_json_valid(l, len, why, sizeof why))
            herd_test_fail(__FILE__, __LINE__, "%s, line %zu is not a JSON object (%s): %.*s", what, lines + 1,
                           len == 0 ? "empty" : l[0] != '{' ? "not an object" : why, (int)(len > 600 ? 600 : len), l);
        lines++;
        l += len + (e ? 1 : 0);
    }
    return lines;
}
