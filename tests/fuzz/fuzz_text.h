/* Text checks shared by the harnesses that look at answers (fuzz_admin.c,
 * fuzz_http.c): written from RFC 3629's table, not with the code under
 * test, so a harness does not check the agent's UTF-8 code against itself.
 */
#ifndef EA_FUZZ_TEXT_H
#define EA_FUZZ_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* The checks are not what is being fuzzed: uninstrumented, they cost the
 * search no time and give it no false leads. */
#define FUZZ_NOCOV __attribute__((no_sanitize("coverage"), noinline, unused))

/* The length (2..4) of the well-formed sequence at s[i..n), or 0. */
FUZZ_NOCOV static size_t fuzz_utf8_seq(const unsigned char *s, size_t i, size_t n) {
  unsigned c = s[i], lo = 0x80, hi = 0xBF;
  size_t k;
  if (c >= 0xC2 && c <= 0xDF) {
    k = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    k = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    k = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + k >= n) return 0;
  if (s[i + 1] < lo || s[i + 1] > hi) return 0;
  for (size_t j = 2; j <= k; j++)
    if ((s[i + j] & 0xC0) != 0x80) return 0;
  return k + 1;
}

/* Is s[0..n) well-formed UTF-8? */
FUZZ_NOCOV static bool fuzz_utf8_valid(const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  for (size_t i = 0; i < n;) {
    if (s[i] < 0x80) {
      i++;
      continue;
    }
    size_t k = fuzz_utf8_seq(s, i, n);
    if (!k) return false;
    i += k;
  }
  return true;
}

/* What the agent promises to make of the NUL-terminated s, at most max
 * bytes of it: each byte that starts no well-formed sequence as U+FFFD, a
 * character that would cross max left out; with ctl, control characters
 * (C0, DEL) as '?'.  out must hold 3 * strlen(s) + 1.  Returns the length. */
FUZZ_NOCOV static size_t fuzz_utf8_model(const char *str, size_t max, bool ctl, char *out) {
  const unsigned char *s = (const unsigned char *)str;
  size_t n = strlen(str), o = 0;
  for (size_t i = 0; i < n && i < max;) {
    size_t k = s[i] < 0x80 ? 1 : fuzz_utf8_seq(s, i, n);
    if (k && i + k > max) break;
    if (!k) {
      memcpy(out + o, "\xEF\xBF\xBD", 3);
      o += 3;
      i++;
      continue;
    }
    for (size_t j = 0; j < k; j++) {
      unsigned char c = s[i + j];
      out[o++] = ctl && (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    i += k;
  }
  out[o] = 0;
  return o;
}

#endif
