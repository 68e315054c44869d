/* json_valid.h — a strict JSON validator for the tests (RFC 8259: no NaN,
 * no Infinity, no trailing commas, no leading zeros, strings with valid
 * escapes and no raw control characters), so a test can fail on anything a
 * real JSON parser would refuse. */
#ifndef HERD_TEST_JSON_VALID_H
#define HERD_TEST_JSON_VALID_H

#include <stdbool.h>
#include <stddef.h>

/* Whether s[0..len) is exactly one JSON value (white space around it
 * allowed); if not, why (with the offset) in why[cap]. */
bool herd_test_json_valid(const char *s, size_t len, char *why, size_t cap);

/* Every line of text (a line at a time; empty lines refused) is one JSON
 * object: fails the test naming `what`, the line and why otherwise. Returns
 * the number of lines. */
size_t herd_test_json_lines(const char *text, const char *what);

#endif
