/* JSON out (json.h). */
#include "core/json.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The length of a non-finite number printf wrote at s ("nan", "-nan",
 * "inf", "-infinity", any case), or 0. */
static size_t nonfinite_len(const char *s)
{
    size_t sign = *s == '-' || *s == '+';
    static const char *const words[] = {"infinity", "nan", "inf"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i]);
        if (!strncasecmp(s + sign, words[i], n) && !isalnum((unsigned char)s[sign + n]) && s[sign + n] != '(')
            return sign + n;
    }
    return 0;
}

int herd__json_write(FILE *f, const char *s)
{
    bool in_str = false;
    char prev = 0; /* the last character outside strings that was not a space */
    for (const char *p = s; *p;) {
        if (in_str) {
            if (*p == '\\' && p[1]) {
                if (fputc(*p++, f) == EOF)
                    return -1;
            } else if (*p == '"') {
                in_str = false;
            }
            if (fputc(*p++, f) == EOF)
                return -1;
            continue;
        }
        size_t n = (prev == ':' || prev == ',' || prev == '[') ? nonfinite_len(p) : 0;
        if (n) {
            if (fputs("null", f) == EOF)
                return -1;
            p += n;
            prev = 'l';
            continue;
        }
        if (*p == '"')
            in_str = true;
        if (!isspace((unsigned char)*p))
            prev = *p;
        if (fputc(*p++, f) == EOF)
            return -1;
    }
    return ferror(f) ? -1 : 0;
}

int herd__json_vprintf(FILE *f, const char *fmt, va_list ap)
{
    char small[2048], *buf = small;
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n < 0) {
        va_end(ap2);
        errno = EINVAL;
        return -1;
    }
    if ((size_t)n >= sizeof small) {
        if (!(buf = malloc((size_t)n + 1))) {
            va_end(ap2);
            errno = ENOMEM;
            return -1;
        }
        vsnprintf(buf, (size_t)n + 1, fmt, ap2);
    }
    va_end(ap2);
    int rc = herd__json_write(f, buf);
    if (buf != small) {
        int e = errno;
        free(buf);
        errno = e;
    }
    return rc;
}

int herd__json_printf(FILE *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = herd__json_vprintf(f, fmt, ap);
    va_end(ap);
    return rc;
}

/* The length of the well-formed UTF-8 sequence at p, whose first byte is
 * not ASCII (2-4), or 0 where the bytes there are not one (a stray
 * continuation byte, a truncated or overlong sequence, a surrogate, a code
 * point past U+10FFFF). */
static size_t utf8_len(const unsigned char *p)
{
    size_t n = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 ? 2 : 0;
    if (!n || p[0] > 0xf4)
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0) || (p[0] == 0xf0 && p[1] < 0x90) ||
        (p[0] == 0xf4 && p[1] >= 0x90))
        return 0;
    return n;
}

void herd__json_quote(char *out, size_t cap, const char *s)
{
    size_t k = 0;
    if (cap == 0)
        return;
    if (!s) {
        snprintf(out, cap, "null");
        return;
    }
    /* room for the closing quote and the NUL is kept back */
    if (cap < 3) {
        out[0] = 0;
        return;
    }
    out[k++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        size_t u = *p >= 0x80 ? utf8_len(p) : 1;
        if (u == 0) /* JSON text is Unicode: a byte that is not UTF-8 (a path's) becomes U+FFFD */
            snprintf(esc, sizeof esc, "\\ufffd");
        else if (u > 1)
            memcpy(esc, p, u), esc[u] = 0, p += u - 1;
        else if (*p == '"' || *p == '\\')
            snprintf(esc, sizeof esc, "\\%c", *p);
        else if (*p == '\n')
            snprintf(esc, sizeof esc, "\\n");
        else if (*p == '\t')
            snprintf(esc, sizeof esc, "\\t");
        else if (*p < 0x20 || *p == 0x7f)
            snprintf(esc, sizeof esc, "\\u%04x", *p);
        else
            esc[0] = (char)*p, esc[1] = 0;
        size_t n = strlen(esc);
        if (k + n + 2 > cap)
            break;
        memcpy(out + k, esc, n);
        k += n;
    }
    out[k++] = '"';
    out[k] = 0;
}
