/* json.h — how herd writes JSON (internal).
 *
 * herd's JSON (the --json summary, the --log records) is formatted with
 * printf, which writes a NaN or an Inf as `nan`, `-nan` or `inf`: not JSON.
 * Every JSON line goes out through herd__json_write, which turns such a
 * number into `null` (a string's contents are left alone), so no reader
 * meets a bare nan. Strings taken from the user or from messages go through
 * herd__json_quote. Reentrant; no state.
 */
#ifndef HERD_CORE_JSON_H
#define HERD_CORE_JSON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* Writes the text s (JSON produced by printf) to f with every non-finite
 * number written as null. 0, or -1 when a write fails (errno says why). */
int herd__json_write(FILE *f, const char *s);
/* printf into memory, then herd__json_write. 0, or -1 with errno set. */
int herd__json_printf(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int herd__json_vprintf(FILE *f, const char *fmt, va_list ap);
/* s as a JSON string, with its quotes, into out (cut to cap - 1 bytes on a
 * character boundary of the escaped form); NULL gives `null`. */
void herd__json_quote(char *out, size_t cap, const char *s);

#endif
