/* One growable string for every module: status documents, manifests, chaos
 * reports.  It was written three times before (admin, manifest, chaos), each
 * with its own growth rule; this is the union of their needs: printf-style
 * appends that try a small stack buffer first, JSON string quoting that
 * survives hostile UTF-8, and a sticky out-of-memory flag so callers check
 * once at the end instead of after every append. */
#include "ea_base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool ea_sb_reserve(ea_sb *b, size_t extra) {
  if (b->oom) return false;
  if (extra > SIZE_MAX - b->len - 1) {
    b->oom = true;
    return false;
  }
  if (b->len + extra + 1 <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) cap = cap > SIZE_MAX / 2 ? b->len + extra + 1 : cap * 2;
  char *nb = realloc(b->buf, cap);
  if (!nb) {
    b->oom = true;
    return false;
  }
  b->buf = nb;
  b->cap = cap;
  return true;
}

void ea_sb_vprintf(ea_sb *b, const char *fmt, va_list ap) {
  va_list again;
  va_copy(again, ap);
  char tmp[256];
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  if (n < 0 || !ea_sb_reserve(b, (size_t)n)) {
    if (n < 0) b->oom = true;
    va_end(again);
    return;
  }
  if ((size_t)n < sizeof tmp)
    memcpy(b->buf + b->len, tmp, (size_t)n + 1);
  else
    vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, again);
  va_end(again);
  b->len += (size_t)n;
}

void ea_sb_printf(ea_sb *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ea_sb_vprintf(b, fmt, ap);
  va_end(ap);
}

void ea_seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

void ea_sb_putn(ea_sb *b, const char *s, size_t n) {
  if (!ea_sb_reserve(b, n)) return;
  memcpy(b->buf + b->len, s, n);
  b->len += n;
  b->buf[b->len] = 0;
}

void ea_sb_puts(ea_sb *b, const char *s) {
  ea_sb_putn(b, s, strlen(s));
}

size_t ea_utf8_len(const unsigned char *p) {
  if (p[0] < 0x80) return 1;
  size_t n = p[0] >= 0xF0 ? 4 : p[0] >= 0xE0 ? 3 : p[0] >= 0xC2 ? 2 : 0;
  if (p[0] > 0xF4) return 0;
  for (size_t i = 1; i < n; i++)
    if ((p[i] & 0xC0) != 0x80) return 0;
  if (n == 3 && ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] >= 0xA0))) return 0;
  if (n == 4 && ((p[0] == 0xF0 && p[1] < 0x90) || (p[0] == 0xF4 && p[1] >= 0x90))) return 0;
  return n;
}

void ea_sb_put_utf8(ea_sb *b, const char *s, size_t max) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0, run = 0; /* p[run..i) is valid and not yet appended */
  while (i < max && p[i]) {
    size_t n = ea_utf8_len(p + i); /* reads no further than p's NUL */
    if (n && i + n > max) break;   /* a whole character past max: leave it out */
    if (n) {
      i += n;
      continue;
    }
    ea_sb_putn(b, s + run, i - run);
    ea_sb_putn(b, "\xEF\xBF\xBD", 3);
    run = ++i;
  }
  ea_sb_putn(b, s + run, i - run);
}

void ea_sb_json_str(ea_sb *b, const char *s) {
  size_t len = strlen(s);
  if (len > (SIZE_MAX - 2) / 6 || !ea_sb_reserve(b, len * 6 + 2)) return;
  char *o = b->buf + b->len;
  *o++ = '"';
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') {
      *o++ = '\\';
      *o++ = (char)*p;
    } else if (*p < 0x20 || *p == 0x7f) {
      o += sprintf(o, "\\u%04x", *p);
    } else if (*p < 0x80) {
      *o++ = (char)*p;
    } else {
      size_t n = ea_utf8_len(p);
      if (n == 0) {
        o += sprintf(o, "\\ufffd");
      } else {
        memcpy(o, p, n);
        o += n;
        p += n - 1;
      }
    }
  }
  *o++ = '"';
  *o = 0;
  b->len = (size_t)(o - b->buf);
}

void ea_sb_reset(ea_sb *b) {
  b->len = 0;
  if (b->buf) b->buf[0] = 0;
}

void ea_sb_free(ea_sb *b) {
  free(b->buf);
  memset(b, 0, sizeof *b);
}
