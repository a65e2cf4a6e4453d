/* json.c — a small, bounded JSON reader for the agents' status documents.
 *
 * The harness reads `status` from each agent several times a second; the
 * document is a few kilobytes of well-known grammar, so a recursive-descent
 * parser into a little DOM is the simplest honest tool (the agent's own
 * reader is internal to agent/, and the harness must not depend on agent
 * internals).  It is bounded: nesting is capped, every read checks the end
 * pointer, and errors name the byte offset.  Numbers keep their text so
 * 64-bit counters can be read exactly.
 */
#include "chaos.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Status documents nest 3 deep; 64 leaves room for anything else an agent
 * might add without letting hostile input recurse without end. */
#define CJ_MAX_DEPTH 64

typedef struct {
  const char *p, *start, *end;
  char *err;
  size_t errlen;
} cur;

static void fail(cur *c, const char *what) {
  if (c->err && c->err[0] == 0) snprintf(c->err, c->errlen, "offset %zu: %s", (size_t)(c->p - c->start), what);
}

static void ws(cur *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

void ea__cj_free(ea__cj *v) {
  if (!v) return;
  for (size_t i = 0; i < v->n; i++) {
    ea__cj_free(v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->str);
  free(v);
}

static int hexv(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

static void put_utf8(char *o, size_t *n, uint32_t cp) {
  if (cp < 0x80) {
    o[(*n)++] = (char)cp;
  } else if (cp < 0x800) {
    o[(*n)++] = (char)(0xc0 | cp >> 6);
    o[(*n)++] = (char)(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    o[(*n)++] = (char)(0xe0 | cp >> 12);
    o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[(*n)++] = (char)(0x80 | (cp & 0x3f));
  } else {
    o[(*n)++] = (char)(0xf0 | cp >> 18);
    o[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[(*n)++] = (char)(0x80 | (cp & 0x3f));
  }
}

static char *parse_string(cur *c) {
  if (c->p >= c->end || *c->p != '"') {
    fail(c, "expected a string");
    return NULL;
  }
  c->p++;
  const char *s = c->p;
  /* The unescaped text is never longer than the escaped one (\uXXXX is 6
   * bytes for at most 4). */
  while (c->p < c->end && *c->p != '"') {
    if (*c->p == '\\') c->p++;
    c->p++;
  }
  if (c->p >= c->end) {
    fail(c, "unterminated string");
    return NULL;
  }
  size_t raw = (size_t)(c->p - s);
  char *o = malloc(raw + 1);
  if (!o) {
    fail(c, "out of memory");
    return NULL;
  }
  size_t n = 0;
  for (const char *q = s; q < c->p; q++) {
    if (*q != '\\') {
      o[n++] = *q;
      continue;
    }
    q++;
    switch (*q) {
      case 'n': o[n++] = '\n'; break;
      case 't': o[n++] = '\t'; break;
      case 'r': o[n++] = '\r'; break;
      case 'b': o[n++] = '\b'; break;
      case 'f': o[n++] = '\f'; break;
      case 'u': {
        if (c->p - q < 5) {
          free(o);
          fail(c, "short \\u escape");
          return NULL;
        }
        uint32_t cp = 0;
        for (int i = 1; i <= 4; i++) {
          int h = hexv(q[i]);
          if (h < 0) {
            free(o);
            fail(c, "bad \\u escape");
            return NULL;
          }
          cp = cp << 4 | (uint32_t)h;
        }
        q += 4;
        put_utf8(o, &n, cp);
        break;
      }
      default: o[n++] = *q; break;
    }
  }
  o[n] = 0;
  c->p++; /* closing quote */
  return o;
}

static ea__cj *node(ea__cj_type t) {
  ea__cj *v = calloc(1, sizeof *v);
  if (v) v->type = t;
  return v;
}

static bool push(ea__cj *v, ea__cj *item, char *key) {
  ea__cj **ni = realloc(v->items, (v->n + 1) * sizeof *ni);
  if (!ni) return false;
  v->items = ni;
  if (v->type == EA__CJ_OBJ) {
    char **nk = realloc(v->keys, (v->n + 1) * sizeof *nk);
    if (!nk) return false;
    v->keys = nk;
    v->keys[v->n] = key;
  }
  v->items[v->n++] = item;
  return true;
}

static ea__cj *parse_value(cur *c, int depth);

static ea__cj *parse_container(cur *c, int depth, bool obj) {
  ea__cj *v = node(obj ? EA__CJ_OBJ : EA__CJ_ARR);
  if (!v) return NULL;
  c->p++; /* { or [ */
  ws(c);
  if (c->p < c->end && *c->p == (obj ? '}' : ']')) {
    c->p++;
    return v;
  }
  for (;;) {
    char *key = NULL;
    ws(c);
    if (obj) {
      key = parse_string(c);
      if (!key) break;
      ws(c);
      if (c->p >= c->end || *c->p != ':') {
        free(key);
        fail(c, "expected ':'");
        break;
      }
      c->p++;
    }
    ea__cj *item = parse_value(c, depth + 1);
    if (!item) {
      free(key);
      break;
    }
    if (!push(v, item, key)) {
      ea__cj_free(item);
      free(key);
      fail(c, "out of memory");
      break;
    }
    ws(c);
    if (c->p < c->end && *c->p == ',') {
      c->p++;
      continue;
    }
    if (c->p < c->end && *c->p == (obj ? '}' : ']')) {
      c->p++;
      return v;
    }
    fail(c, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    break;
  }
  ea__cj_free(v);
  return NULL;
}

static ea__cj *parse_value(cur *c, int depth) {
  if (depth > CJ_MAX_DEPTH) {
    fail(c, "nested too deeply");
    return NULL;
  }
  ws(c);
  if (c->p >= c->end) {
    fail(c, "unexpected end");
    return NULL;
  }
  char ch = *c->p;
  if (ch == '{' || ch == '[') return parse_container(c, depth, ch == '{');
  if (ch == '"') {
    char *s = parse_string(c);
    if (!s) return NULL;
    ea__cj *v = node(EA__CJ_STR);
    if (!v) {
      free(s);
      return NULL;
    }
    v->str = s;
    return v;
  }
  static const struct {
    const char *word;
    ea__cj_type t;
    bool b;
  } words[] = {{"null", EA__CJ_NULL, false}, {"true", EA__CJ_BOOL, true}, {"false", EA__CJ_BOOL, false}};
  for (size_t i = 0; i < 3; i++) {
    size_t l = strlen(words[i].word);
    if ((size_t)(c->end - c->p) >= l && memcmp(c->p, words[i].word, l) == 0) {
      c->p += l;
      ea__cj *v = node(words[i].t);
      if (v) v->b = words[i].b;
      return v;
    }
  }
  if (ch == '-' || (ch >= '0' && ch <= '9')) {
    const char *s = c->p;
    while (c->p < c->end && (strchr("+-.eE", *c->p) || (*c->p >= '0' && *c->p <= '9'))) c->p++;
    size_t l = (size_t)(c->p - s);
    ea__cj *v = node(EA__CJ_NUM);
    if (!v) return NULL;
    v->str = malloc(l + 1);
    if (!v->str) {
      free(v);
      return NULL;
    }
    memcpy(v->str, s, l);
    v->str[l] = 0;
    char *end;
    v->num = strtod(v->str, &end);
    if (*end) {
      ea__cj_free(v);
      fail(c, "malformed number");
      return NULL;
    }
    return v;
  }
  fail(c, "unexpected character");
  return NULL;
}

ea__cj *ea__cj_parse(const char *buf, size_t len, char *err, size_t errlen) {
  cur c = {.p = buf, .start = buf, .end = buf + len, .err = err, .errlen = errlen};
  if (err && errlen) err[0] = 0;
  ea__cj *v = parse_value(&c, 0);
  if (!v) return NULL;
  ws(&c);
  if (c.p != c.end) {
    fail(&c, "trailing bytes");
    ea__cj_free(v);
    return NULL;
  }
  return v;
}

const ea__cj *ea__cj_path(const ea__cj *v, const char *path) {
  char key[128];
  while (v && path && *path) {
    size_t l = strcspn(path, ".");
    if (l >= sizeof key || v->type != EA__CJ_OBJ) return NULL;
    memcpy(key, path, l);
    key[l] = 0;
    const ea__cj *next = NULL;
    for (size_t i = 0; i < v->n; i++)
      if (strcmp(v->keys[i], key) == 0) {
        next = v->items[i];
        break;
      }
    v = next;
    path += l;
    if (*path == '.') path++;
  }
  return v;
}

const char *ea__cj_str(const ea__cj *v, const char *path, const char *def) {
  const ea__cj *x = ea__cj_path(v, path);
  return x && x->type == EA__CJ_STR ? x->str : def;
}

double ea__cj_num(const ea__cj *v, const char *path, double def) {
  const ea__cj *x = ea__cj_path(v, path);
  return x && x->type == EA__CJ_NUM ? x->num : def;
}

uint64_t ea__cj_u64(const ea__cj *v, const char *path, uint64_t def) {
  const ea__cj *x = ea__cj_path(v, path);
  if (!x || x->type != EA__CJ_NUM || x->str[0] == '-') return def;
  char *end;
  errno = 0;
  unsigned long long u = strtoull(x->str, &end, 10);
  if (errno || *end) return (uint64_t)x->num;
  return (uint64_t)u;
}

bool ea__cj_bool(const ea__cj *v, const char *path, bool def) {
  const ea__cj *x = ea__cj_path(v, path);
  return x && x->type == EA__CJ_BOOL ? x->b : def;
}
