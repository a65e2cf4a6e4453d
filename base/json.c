/* JSON for both ends of the admin socket, on jansson.
 *
 * The agent writes its answers (the `status` document, `drain`, `help`,
 * errors) as jansson values and sends them as one line of compact JSON; the
 * CLI reads them back.  jansson does the grammar, the escaping and the
 * UTF-8 checks; this file adds only what our documents need on top:
 *
 *   - typed setters that survive running out of memory anywhere in a large
 *     document: the first failure sets a sticky flag in an ea_jb, every
 *     later call still frees what it is handed, and the builder looks at
 *     the flag once at the end (an answer with holes is never sent);
 *   - strings from the network (member names, addresses, reasons) that may
 *     not be valid UTF-8: invalid bytes become U+FFFD, so the document stays
 *     valid for strict parsers whatever a peer put in its name;
 *   - reals printed like printf's "%.Nf" values they replace (rounded to N
 *     decimals, written with 15 significant digits — DBL_DIG, so the text is
 *     the shortest that reads back to the same double), unsigned 64-bit
 *     counters written exactly;
 *   - the small read-only DOM (ea_json) the CLI walks to print `status`
 *     for people, built from jansson's parse: values keep their literal text
 *     so 64-bit counters print exactly, and nesting is bounded.
 */
#include "ea_json.h"
#include "ea_base.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Nesting the reader accepts: our documents nest 4 deep. */
#define JSON_MAX_DEPTH 64
/* Significant digits of a written real: DBL_DIG.  Every real we write was
 * rounded to at most 6 decimals first, so 15 digits print it exactly as
 * "%.Nf" would, minus trailing zeros. */
#define JSON_REAL_DIGITS 15

/* ---- writing ----------------------------------------------------------------- */

void ea_jb_set(ea_jb *b, json_t *o, const char *key, json_t *v) {
  int rc = -1;
  if (v && o)
    rc = key ? json_object_set_new(o, key, v) : json_array_append_new(o, v);
  else
    json_decref(v);
  if (rc < 0) b->oom = true;
}

/* Set the new container c at key of o; o then holds the reference, and c
 * is returned borrowed — or NULL once anything failed. */
static json_t *child(ea_jb *b, json_t *o, const char *key, json_t *c) {
  ea_jb_set(b, o, key, c);
  return b->oom ? NULL : c;
}

json_t *ea_jb_obj(ea_jb *b, json_t *o, const char *key) {
  return child(b, o, key, json_object());
}

json_t *ea_jb_arr(ea_jb *b, json_t *o, const char *key) {
  return child(b, o, key, json_array());
}

static json_t *jv_str(const char *s) {
  if (!s) s = "";
  json_t *v = json_string(s);
  if (v) return v;
  /* Not valid UTF-8 (or out of memory): replace what is not. */
  size_t len = strlen(s);
  char *t = malloc(len * 3 + 1); /* a byte becomes at most U+FFFD's 3 */
  if (!t) return NULL;
  char *o = t;
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    size_t n = ea_utf8_len(p);
    if (n == 0) {
      memcpy(o, "\xEF\xBF\xBD", 3);
      o += 3;
      p++;
    } else {
      memcpy(o, p, n);
      o += n;
      p += n;
    }
  }
  *o = 0;
  v = json_string(t);
  free(t);
  return v;
}

static json_t *jv_u64(uint64_t v) {
  /* json_int_t is signed; counters never reach 2^63, but one that did
   * would print as a large real rather than a negative integer. */
  if (v > (uint64_t)INT64_MAX) return json_real((double)v);
  return json_integer((json_int_t)v);
}

static json_t *jv_fixed(double v, int decimals) {
  if (!isfinite(v)) return json_null();
  double scale = pow(10.0, decimals);
  double r = round(v * scale) / scale;
  if (!isfinite(r)) r = v;            /* too large to scale: already integral */
  return json_real(r == 0 ? 0.0 : r); /* no "-0.0" */
}

void ea_jb_str(ea_jb *b, json_t *o, const char *key, const char *s) {
  ea_jb_set(b, o, key, jv_str(s));
}

void ea_jb_u64(ea_jb *b, json_t *o, const char *key, uint64_t v) {
  ea_jb_set(b, o, key, jv_u64(v));
}

void ea_jb_int(ea_jb *b, json_t *o, const char *key, int64_t v) {
  ea_jb_set(b, o, key, json_integer((json_int_t)v));
}

void ea_jb_bool(ea_jb *b, json_t *o, const char *key, bool v) {
  ea_jb_set(b, o, key, json_boolean(v));
}

void ea_jb_fixed(ea_jb *b, json_t *o, const char *key, double v, int decimals) {
  ea_jb_set(b, o, key, jv_fixed(v, decimals));
}

void ea_jb_null(ea_jb *b, json_t *o, const char *key) {
  ea_jb_set(b, o, key, json_null());
}

char *ea_json_dump(const json_t *doc) {
  /* Measured, then written into our own malloc'd buffer: the caller frees
   * it with free() whatever allocator jansson was given. */
  const size_t flags = JSON_COMPACT | JSON_REAL_PRECISION(JSON_REAL_DIGITS);
  size_t n = json_dumpb(doc, NULL, 0, flags);
  char *s = n ? malloc(n + 1) : NULL;
  if (!s || json_dumpb(doc, s, n, flags) != n) {
    free(s);
    return NULL;
  }
  s[n] = 0;
  return s;
}

json_t *ea_json_error(const char *msg) {
  ea_jb b = {0};
  json_t *d = json_object();
  ea_jb_str(&b, d, "error", msg);
  if (b.oom) {
    json_decref(d);
    return NULL;
  }
  return d;
}

/* ---- reading ----------------------------------------------------------------- */

/* The literal text of a number as our writer prints it: integers as they
 * are, reals with the fewest digits that read back to the same double
 * (15 for everything we write), in jansson's spelling: a ".0" when that
 * looks like an integer, no '+' or leading zeros in an exponent. */
static char *number_text(const json_t *v) {
  char buf[64];
  if (json_is_integer(v)) {
    snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    return strdup(buf);
  }
  double d = json_real_value(v);
  snprintf(buf, sizeof buf, "%.*g", JSON_REAL_DIGITS, d);
  if (strtod(buf, NULL) != d) snprintf(buf, sizeof buf, "%.17g", d);
  char *e = strchr(buf, 'e');
  if (e) {
    char *digits = e + 1 + (e[1] == '-');
    char *from = e[1] == '+' ? e + 2 : digits;
    while (from[0] == '0' && from[1]) from++;
    memmove(e[1] == '+' ? e + 1 : digits, from, strlen(from) + 1);
  } else if (!strchr(buf, '.')) {
    strcat(buf, ".0");
  }
  return strdup(buf);
}

/* Copy jansson's value v into the ea_json node out (type, text, children). */
static int convert(const json_t *v, ea_json *out, int depth, char *err, size_t errlen) {
  if (depth > JSON_MAX_DEPTH) {
    snprintf(err, errlen, "JSON nested deeper than %d", JSON_MAX_DEPTH);
    return -EINVAL;
  }
  switch (json_typeof(v)) {
    case JSON_OBJECT:
    case JSON_ARRAY: {
      bool obj = json_is_object(v);
      out->type = obj ? EA_J_OBJ : EA_J_ARR;
      ea_json **tail = &out->child;
      const char *key;
      json_t *c;
      size_t i = 0, n = obj ? json_object_size(v) : json_array_size(v);
      void *it = obj ? json_object_iter((json_t *)v) : NULL;
      for (; i < n; i++) {
        if (obj) {
          key = json_object_iter_key(it);
          c = json_object_iter_value(it);
          it = json_object_iter_next((json_t *)v, it);
        } else {
          key = NULL;
          c = json_array_get(v, i);
        }
        ea_json *e = calloc(1, sizeof *e);
        if (!e) return -ENOMEM;
        *tail = e;
        tail = &e->next;
        out->n++;
        if (key && !(e->key = strdup(key))) return -ENOMEM;
        int rc = convert(c, e, depth + 1, err, errlen);
        if (rc) return rc;
      }
      return 0;
    }
    case JSON_STRING:
      out->type = EA_J_STR;
      out->text = strdup(json_string_value(v));
      break;
    case JSON_INTEGER:
    case JSON_REAL:
      out->type = EA_J_NUM;
      out->num = json_number_value(v);
      out->text = number_text(v);
      break;
    case JSON_TRUE:
    case JSON_FALSE:
      out->type = EA_J_BOOL;
      out->b = json_is_true(v);
      out->text = strdup(out->b ? "true" : "false");
      break;
    default:
      out->type = EA_J_NULL;
      out->text = strdup("null");
      break;
  }
  return out->text ? 0 : -ENOMEM;
}

void ea_json_free(ea_json *j) {
  while (j) {
    ea_json *next = j->next;
    ea_json_free(j->child);
    free(j->key);
    free(j->text);
    free(j);
    j = next;
  }
}

int ea_json_parse(const char *s, size_t len, ea_json **out, char *err, size_t errlen) {
  json_error_t je;
  json_t *doc = json_loadb(s, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
  if (!doc) {
    snprintf(err, errlen, "JSON offset %d: %s", je.position, je.text);
    return -EINVAL;
  }
  ea_json *root = calloc(1, sizeof *root);
  int rc = root ? convert(doc, root, 0, err, errlen) : -ENOMEM;
  json_decref(doc);
  if (rc) {
    if (rc == -ENOMEM) snprintf(err, errlen, "out of memory");
    ea_json_free(root);
    return rc;
  }
  *out = root;
  return 0;
}

const ea_json *ea_json_get(const ea_json *j, const char *path) {
  while (j && *path) {
    const char *dot = strchr(path, '.');
    size_t l = dot ? (size_t)(dot - path) : strlen(path);
    const ea_json *c = NULL;
    if (j->type == EA_J_OBJ)
      for (c = j->child; c; c = c->next)
        if (strlen(c->key) == l && memcmp(c->key, path, l) == 0) break;
    j = c;
    path += l + (dot != NULL);
  }
  return j;
}

const char *ea_json_str(const ea_json *j, const char *path, const char *dflt) {
  const ea_json *v = ea_json_get(j, path);
  return v && v->text ? v->text : dflt;
}

double ea_json_num(const ea_json *j, const char *path, double dflt) {
  const ea_json *v = ea_json_get(j, path);
  if (v && v->type == EA_J_NUM) return v->num;
  if (v && v->type == EA_J_BOOL) return v->b;
  return dflt;
}
