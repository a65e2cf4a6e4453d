/* The job file: the YAML loader, `--set` overrides, cross-field
 * validation, the dump and the configuration hash.
 *
 * Each is a walk over the key table of keys.c (one row per key: what it is
 * and what it accepts), through the helpers config_int.h declares, so a key
 * is declared once and cannot be settable in one place and unknown in
 * another.
 *
 * The loader uses libyaml's document API: a job file is a few kilobytes, and
 * a node tree with start marks makes "FILE:LINE: section.key: problem"
 * messages and duplicate-key detection simple.  The schema is strict on
 * purpose — an operator who mistypes a key or a value in a file that drives
 * hundreds of GPUs wants to hear about it before the job starts, not find a
 * default silently in force — so unknown sections and keys, duplicates, and
 * values of the wrong type or out of range are errors, and a file's every
 * problem is reported at once, a line each.  Loading and setting work on a
 * copy, so on error the caller's configuration is unchanged. */
#include "config_int.h"

#include "ea_base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: hashing never allocates */
#include <xxh_x86dispatch.h>

/* A job file is a few kilobytes; 1 MiB leaves room for generous comments
 * while refusing to slurp a wrong path such as a dataset or /dev/zero. */
#define CFG_FILE_MAX (1u << 20)

/* ---- UTF-8 (--set and the dump) ---------------------------------------- */

/* Decode one UTF-8 sequence at s[0..n): its length, or 0 when malformed
 * (overlong, surrogate, beyond U+10FFFF, truncated) — libyaml's reader
 * refuses the same. */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
  size_t len = s[0] < 0x80             ? 1
               : (s[0] & 0xe0) == 0xc0 ? 2
               : (s[0] & 0xf0) == 0xe0 ? 3
               : (s[0] & 0xf8) == 0xf0 ? 4
                                       : 0;
  if (len == 0 || len > n) return 0;
  static const uint32_t lead_mask[] = {0, 0x7f, 0x1f, 0x0f, 0x07};
  static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
  uint32_t v = s[0] & lead_mask[len];
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    v = v << 6 | (s[i] & 0x3f);
  }
  if (v < least[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
  *cp = v;
  return len;
}

/* Byte offset of the first malformed sequence, or SIZE_MAX. */
static size_t utf8_invalid_at(const char *s, size_t n) {
  uint32_t cp;
  for (size_t i = 0; i < n;) {
    size_t l = utf8_next((const unsigned char *)s + i, n - i, &cp);
    if (!l) return i;
    i += l;
  }
  return SIZE_MAX;
}

/* ---- the YAML loader ---------------------------------------------------- */

/* The loader goes on past a problem and reports every one, a line each
 * ("FILE:LINE: key: problem\n…"), so an operator fixes a file in one pass
 * instead of one run per typo.  Only a YAML syntax error stops it: libyaml
 * builds no document after one. */
typedef struct {
  const char *path;
  char *err;
  size_t errlen, used;
  unsigned nerr;
  yaml_document_t *doc;
} loader;

static void lerr(loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lerr(loader *L, const char *fmt, ...) {
  L->nerr++;
  if (!L->err || L->errlen == 0 || L->used + 1 >= L->errlen) return;
  size_t at = L->used;
  if (at) L->err[at++] = '\n';
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(L->err + at, L->errlen - at, fmt, ap);
  va_end(ap);
  /* One line per problem: a value quoted in it may hold line breaks (a
   * double-quoted YAML scalar folds them in) or other control bytes. */
  for (char *c = L->err + at; *c; c++)
    if ((unsigned char)*c < 0x20) *c = '?';
  if (n < 0 || at + (size_t)n >= L->errlen) {
    /* Keep whole lines only (a cut one would not read as FILE:LINE: …),
     * except the first: better cut than nothing. */
    if (L->used) L->err[L->used] = 0;
    L->used = L->errlen; /* full: later problems are counted, not shown */
    return;
  }
  L->used = at + (size_t)n;
}

static const char *node_kind(const yaml_node_t *n) {
  switch (n->type) {
    case YAML_MAPPING_NODE:
      return "a mapping";
    case YAML_SEQUENCE_NODE:
      return "a sequence";
    default:
      return "a scalar";
  }
}

static size_t node_line(const yaml_node_t *n) {
  return n->start_mark.line + 1;
}

static bool scalar_is_null(const yaml_node_t *n) {
  if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
  const char *v = (const char *)n->data.scalar.value;
  size_t len = n->data.scalar.length;
  return len == 0 || (len == 1 && v[0] == '~') ||
         (len == 4 && (!memcmp(v, "null", 4) || !memcmp(v, "Null", 4) || !memcmp(v, "NULL", 4)));
}

/* A mapping key as a C string (bounded), or NULL when not a scalar. */
static const char *key_name(const yaml_node_t *n, char *buf, size_t cap) {
  if (n->type != YAML_SCALAR_NODE) return NULL;
  size_t len = n->data.scalar.length < cap - 1 ? n->data.scalar.length : cap - 1;
  memcpy(buf, n->data.scalar.value, len);
  buf[len] = 0;
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)buf[i] < 0x20) buf[i] = '?'; /* keep the message on one line */
  return buf;
}

static int load_section(loader *L, ea_config *c, const char *section, const yaml_node_t *map,
                        size_t *seen_line) {
  if (scalar_is_null(map)) return 0; /* "compute:" with every key commented out */
  if (map->type != YAML_MAPPING_NODE) {
    lerr(L, "%s:%zu: %s: expected a mapping of keys, found %s", L->path, node_line(map), section,
         node_kind(map));
    return 0;
  }
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
    yaml_node_t *kn = yaml_document_get_node(L->doc, p->key);
    yaml_node_t *vn = yaml_document_get_node(L->doc, p->value);
    char name[64], why[384];
    if (!key_name(kn, name, sizeof name)) {
      lerr(L, "%s:%zu: %s: expected a key name, found %s", L->path, node_line(kn), section,
           node_kind(kn));
      continue;
    }
    const cfg_key *k = ea__cfg_find_key(section, name);
    if (!k || strlen(name) != kn->data.scalar.length) {
      ea__cfg_unknown_key_msg(section, name, why, sizeof why);
      lerr(L, "%s:%zu: %s.%s: %s", L->path, node_line(kn), section, name, why);
      continue;
    }
    /* An old name and the new one set the same field: giving both is a
     * duplicate too. */
    size_t idx = (size_t)(ea__cfg_canonical(k) - ea__cfg_keys);
    if (seen_line[idx]) {
      lerr(
          L, "%s:%zu: %s.%s: duplicate key (first given on line %zu%s)", L->path, node_line(kn),
          section, name, seen_line[idx],
          k != ea__cfg_canonical(k) || seen_line[ea__cfg_nkeys + idx] ? " under another name" : "");
      continue;
    }
    seen_line[idx] = node_line(kn);
    if (k != ea__cfg_canonical(k)) seen_line[ea__cfg_nkeys + idx] = 1;
    ea__cfg_note_alias(c, k);
    if (vn->type != YAML_SCALAR_NODE) {
      lerr(L, "%s:%zu: %s.%s: expected a single value, found %s", L->path, node_line(vn), section,
           name, node_kind(vn));
      continue;
    }
    bool quoted = vn->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    int rc =
        ea__cfg_parse_into(c, ea__cfg_canonical(k), (const char *)vn->data.scalar.value,
                           vn->data.scalar.length, quoted, scalar_is_null(vn), why, sizeof why);
    if (rc) lerr(L, "%s:%zu: %s.%s: %s", L->path, node_line(vn), section, name, why);
  }
  return 0;
}

static int load_root(loader *L, ea_config *c, const yaml_node_t *root) {
  if (!root || scalar_is_null(root)) return 0; /* empty file, comments, or a bare "---" */
  if (root->type != YAML_MAPPING_NODE) {
    lerr(L, "%s:%zu: expected a mapping of sections, found %s", L->path, node_line(root),
         node_kind(root));
    return -EINVAL;
  }
  /* line of each key; [ea__cfg_nkeys + i]: given by an old name */
  size_t seen_key[2 * EA__CFG_NKEYS_MAX] = {0};
  struct {
    const char *name;
    size_t line;
  } seen_sec[16];
  size_t nsec = 0;
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
       p++) {
    yaml_node_t *kn = yaml_document_get_node(L->doc, p->key);
    yaml_node_t *vn = yaml_document_get_node(L->doc, p->value);
    char name[64], why[384];
    if (!key_name(kn, name, sizeof name)) {
      lerr(L, "%s:%zu: expected a section name, found %s", L->path, node_line(kn), node_kind(kn));
      continue;
    }
    if (!ea__cfg_section_known(name, kn->data.scalar.length)) {
      ea__cfg_unknown_section_msg(name, why, sizeof why);
      lerr(L, "%s:%zu: %s: %s", L->path, node_line(kn), name, why);
      continue;
    }
    const char *canon = NULL; /* the table's own string: lives as long as the loop */
    for (size_t i = 0; i < ea__cfg_nkeys && !canon; i++)
      if (strcmp(ea__cfg_keys[i].section, name) == 0) canon = ea__cfg_keys[i].section;
    bool dup = false;
    for (size_t i = 0; i < nsec && !dup; i++) {
      if (strcmp(seen_sec[i].name, canon) == 0) {
        lerr(L, "%s:%zu: %s: duplicate section (first given on line %zu)", L->path, node_line(kn),
             name, seen_sec[i].line);
        dup = true;
      }
    }
    if (dup) continue;
    if (nsec < sizeof seen_sec / sizeof seen_sec[0])
      seen_sec[nsec].name = canon, seen_sec[nsec++].line = node_line(kn);
    load_section(L, c, canon, vn, seen_key);
  }
  return L->nerr ? -EINVAL : 0;
}

static int read_file(const char *path, char **out, size_t *outlen, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    ea_seterr(err, errlen, "%s: cannot open: %s", path, strerror(e));
    return -e;
  }
  char *buf = malloc(CFG_FILE_MAX + 1);
  if (!buf) {
    close(fd);
    ea_seterr(err, errlen, "%s: cannot read: %s", path, strerror(ENOMEM));
    return -ENOMEM;
  }
  size_t len = 0;
  for (;;) {
    ssize_t r = read(fd, buf + len, CFG_FILE_MAX + 1 - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      free(buf);
      close(fd);
      ea_seterr(err, errlen, "%s: cannot read: %s", path, strerror(e));
      return -e;
    }
    if (r == 0) break;
    len += (size_t)r;
    if (len > CFG_FILE_MAX) {
      free(buf);
      close(fd);
      ea_seterr(err, errlen, "%s: file too large (more than %u bytes)", path, CFG_FILE_MAX);
      return -EFBIG;
    }
  }
  close(fd);
  *out = buf;
  *outlen = len;
  return 0;
}

/* The line of byte `off` as YAML counts them (libyaml's marks): a line
 * ends at \n, at \r\n, and at a lone \r. */
static size_t line_of_offset(const char *buf, size_t len, size_t off) {
  size_t line = 1;
  for (size_t i = 0; i < off && i < len; i++)
    line += buf[i] == '\n' || (buf[i] == '\r' && (i + 1 >= len || buf[i + 1] != '\n'));
  return line;
}

static int syntax_error(const yaml_parser_t *p, const char *path, const char *buf, size_t len,
                        char *err, size_t errlen) {
  if (p->error == YAML_MEMORY_ERROR) {
    ea_seterr(err, errlen, "%s: out of memory while parsing", path);
    return -ENOMEM;
  }
  const char *problem = p->problem ? p->problem : "malformed YAML";
  /* libyaml can put the mark of an error at the end of the input one line
   * past the last (a file that does not end with a newline): name the last
   * line instead of one that is not there (found by fuzz_config). */
  size_t last = line_of_offset(buf, len, len);
  size_t pl = p->problem_mark.line + 1, cl = p->context_mark.line + 1;
  if (pl > last) pl = last;
  if (cl > last) cl = last;
  if (p->error == YAML_READER_ERROR) {
    /* The reader reports a byte offset, not a mark. */
    ea_seterr(err, errlen, "%s:%zu: syntax error: %s (byte %zu)", path,
              line_of_offset(buf, len, p->problem_offset), problem, p->problem_offset);
  } else if (p->context) {
    ea_seterr(err, errlen, "%s:%zu: syntax error: %s (%s at line %zu)", path, pl, problem,
              p->context, cl);
  } else {
    ea_seterr(err, errlen, "%s:%zu: syntax error: %s", path, pl, problem);
  }
  return -EINVAL;
}

/* Bounds checked before libyaml builds a document, because building one
 * costs more than linear time in two shapes a 1 MiB file can take:
 *
 *  - nesting: libyaml 0.2.5 (Debian 12's) has no depth limit, and its scanner
 *    walks the stack of open flow levels for every token it reads, so a file
 *    of D `[` costs D^2: 40,000 levels took 7 s, 200,000 (400 KiB) over
 *    60 s (issue 27; over 300 s on a loaded 2-core machine).  A job file
 *    nests 2 deep (the mapping of sections, each section's mapping of keys;
 *    values are scalars); 64 leaves room for any YAML an operator writes by
 *    hand, and is checked after reading at most 64 levels, with libyaml's
 *    own scanner reading ahead at most 1024 characters (its simple-key
 *    window) past them.
 *  - anchors: its composer checks each new anchor against every earlier one
 *    and resolves each alias by a walk of all anchors, so 60,000 anchors took
 *    25 s.  Values are scalars, so an anchor saves little in a job file; 64
 *    is many times what a hand-written file uses, and 64 anchors times the
 *    most aliases 1 MiB holds (~350,000) is a few million string compares.
 *
 * This pass reads the stream as events (no tree, constant memory) and stops
 * at the first bound crossed; a syntax error it meets is left to the loader,
 * which reports it the usual way at the same place. */
#define CFG_DEPTH_MAX 64
#define CFG_ANCHORS_MAX 64

static int check_bounds(const char *path, const char *buf, size_t len, char *err, size_t errlen) {
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p)) {
    ea_seterr(err, errlen, "%s: out of memory", path);
    return -ENOMEM;
  }
  yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
  int rc = 0;
  unsigned depth = 0, anchors = 0;
  for (bool done = false; !done && rc == 0;) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&p, &ev)) break; /* the loader reports it */
    const unsigned char *anchor = NULL;
    switch (ev.type) {
      case YAML_SEQUENCE_START_EVENT:
      case YAML_MAPPING_START_EVENT:
        anchor = ev.type == YAML_SEQUENCE_START_EVENT ? ev.data.sequence_start.anchor
                                                      : ev.data.mapping_start.anchor;
        if (++depth > CFG_DEPTH_MAX) {
          ea_seterr(err, errlen,
                    "%s:%zu: nested more than %d levels deep (the limit; a job file needs 2)", path,
                    ev.start_mark.line + 1, CFG_DEPTH_MAX);
          rc = -EINVAL;
        }
        break;
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT:
        depth--;
        break;
      case YAML_SCALAR_EVENT:
        anchor = ev.data.scalar.anchor;
        break;
      case YAML_STREAM_END_EVENT:
        done = true;
        break;
      default:
        break;
    }
    if (anchor && rc == 0 && ++anchors > CFG_ANCHORS_MAX) {
      ea_seterr(err, errlen, "%s:%zu: more than %d anchors (&name) in one file (the limit)", path,
                ev.start_mark.line + 1, CFG_ANCHORS_MAX);
      rc = -EINVAL;
    }
    yaml_event_delete(&ev);
  }
  yaml_parser_delete(&p);
  return rc;
}

int ea_config_load(ea_config *c, const char *path, char *err, size_t errlen) {
  char *buf = NULL;
  size_t len = 0;
  int rc = read_file(path, &buf, &len, err, errlen);
  if (rc) return rc;
  rc = check_bounds(path, buf, len, err, errlen);
  if (rc) {
    free(buf);
    return rc;
  }

  ea_config *tmp = malloc(sizeof *tmp);
  yaml_parser_t parser;
  if (!tmp || !yaml_parser_initialize(&parser)) {
    free(tmp);
    free(buf);
    ea_seterr(err, errlen, "%s: out of memory", path);
    return -ENOMEM;
  }
  memcpy(tmp, c, sizeof *tmp);
  yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
  yaml_document_t doc;
  if (!yaml_parser_load(&parser, &doc)) {
    rc = syntax_error(&parser, path, buf, len, err, errlen);
    goto out;
  }
  loader L = {.path = path, .err = err, .errlen = errlen, .doc = &doc};
  rc = load_root(&L, tmp, yaml_document_get_root_node(&doc));
  yaml_document_delete(&doc);
  if (rc) goto out;

  /* A second document would be silently ignored by a reader that takes the
   * first: refuse it instead. */
  if (!yaml_parser_load(&parser, &doc)) {
    rc = syntax_error(&parser, path, buf, len, err, errlen);
    goto out;
  }
  yaml_node_t *extra = yaml_document_get_root_node(&doc);
  if (extra) {
    ea_seterr(err, errlen, "%s:%zu: expected one YAML document, found another", path,
              doc.start_mark.line + 1);
    rc = -EINVAL;
  }
  yaml_document_delete(&doc);
  if (rc == 0) memcpy(c, tmp, sizeof *c);
out:
  yaml_parser_delete(&parser);
  free(tmp);
  free(buf);
  return rc;
}

/* ---- --set -------------------------------------------------------------- */

int ea_config_set(ea_config *c, const char *key, const char *value, char *err, size_t errlen) {
  char section[64], why[384];
  const char *dot = key ? strchr(key, '.') : NULL;
  if (!dot || dot == key || (size_t)(dot - key) >= sizeof section) {
    ea_seterr(err, errlen, "--set: %s: expected SECTION.KEY=VALUE", key ? key : "");
    return -EINVAL;
  }
  memcpy(section, key, (size_t)(dot - key));
  section[dot - key] = 0;
  if (!ea__cfg_section_known(section, strlen(section))) {
    ea__cfg_unknown_section_msg(section, why, sizeof why);
    ea_seterr(err, errlen, "--set: %s: %s", key, why);
    return -EINVAL;
  }
  const cfg_key *k = ea__cfg_find_key(section, dot + 1);
  if (!k) {
    ea__cfg_unknown_key_msg(section, dot + 1, why, sizeof why);
    ea_seterr(err, errlen, "--set: %s: %s", key, why);
    return -EINVAL;
  }
  if (!value) {
    ea_seterr(err, errlen, "--set: %s: missing value", key);
    return -EINVAL;
  }
  /* A flag value is taken as written: for strings it is the string itself
   * (no YAML quoting), for the rest it reads like a plain YAML scalar.
   * Strings must be UTF-8, or the dump of this configuration would not
   * load again. */
  ea_config *tmp = malloc(sizeof *tmp);
  if (!tmp) {
    ea_seterr(err, errlen, "--set: %s: out of memory", key);
    return -ENOMEM;
  }
  memcpy(tmp, c, sizeof *tmp);
  size_t bad = utf8_invalid_at(value, strlen(value));
  int rc;
  if ((k->type == T_STR || k->type == T_ENUM) && bad != SIZE_MAX) {
    snprintf(why, sizeof why, "not valid UTF-8 (byte %zu)", bad);
    rc = -EINVAL;
  } else {
    rc = ea__cfg_parse_into(tmp, ea__cfg_canonical(k), value, strlen(value), false, false, why,
                            sizeof why);
  }
  if (rc) {
    ea_seterr(err, errlen, "--set: %s: %s", key, why);
  } else {
    memcpy(ea__cfg_field(c, k), ea__cfg_field(tmp, k), ea__cfg_canonical(k)->size);
    ea__cfg_note_alias(c, k);
  }
  free(tmp);
  return rc;
}

/* ---- validate ----------------------------------------------------------- */

int ea_config_validate(const ea_config *c, char *err, size_t errlen) {
  char expect[160], why[384];
  /* Per key: the same rules the loader applies, for configurations built
   * or changed in code. */
  for (size_t i = 0; i < ea__cfg_nkeys; i++) {
    const cfg_key *k = &ea__cfg_keys[i];
    const void *f = ea__cfg_cfield(c, k);
    if (k->flags & OTHER_NAME) continue;
    switch (k->type) {
      case T_U32:
      case T_U64: {
        uint64_t v = k->type == T_U32 ? *(const uint32_t *)f : *(const uint64_t *)f;
        if (!ea__cfg_int_ok(k, v)) {
          ea__cfg_int_expect(k, expect, sizeof expect);
          ea_seterr(err, errlen, "%s.%s: expected %s, found %llu", k->section, k->key, expect,
                    (unsigned long long)v);
          return -EINVAL;
        }
        break;
      }
      case T_DOUBLE: {
        double v = *(const double *)f;
        if (!ea__cfg_dbl_ok(k, v)) {
          ea__cfg_dbl_expect(k, expect, sizeof expect);
          ea_seterr(err, errlen, "%s.%s: expected %s, found %g", k->section, k->key, expect, v);
          return -EINVAL;
        }
        break;
      }
      case T_BOOL:
        break;
      case T_STR:
      case T_ENUM: {
        const char *s = f;
        const char *end = memchr(s, 0, k->size);
        if (!end) {
          ea_seterr(err, errlen, "%s.%s: not NUL-terminated", k->section, k->key);
          return -EINVAL;
        }
        bool expectation;
        const char *p = ea__cfg_str_problem(k, s, (size_t)(end - s), why, sizeof why, &expectation);
        if (p) {
          ea_seterr(err, errlen, expectation ? "%s.%s: %s, found \"%s\"" : "%s.%s: %s", k->section,
                    k->key, p, s);
          return -EINVAL;
        }
        break;
      }
    }
  }

  /* Across keys. */
  if (c->compute.min_nodes > c->compute.max_nodes) {
    ea_seterr(err, errlen, "compute.min_nodes: %u is greater than compute.max_nodes (%u)",
              c->compute.min_nodes, c->compute.max_nodes);
    return -EINVAL;
  }
  if (c->distributed.micro_batch > c->distributed.global_batch) {
    ea_seterr(err, errlen,
              "distributed.micro_batch: %u is greater than distributed.global_batch (%u)",
              c->distributed.micro_batch, c->distributed.global_batch);
    return -EINVAL;
  }
  if (c->membership.probe_timeout_ms >= c->membership.probe_interval_ms) {
    ea_seterr(err, errlen,
              "membership.probe_timeout_ms: %u must be less than membership.probe_interval_ms (%u)",
              c->membership.probe_timeout_ms, c->membership.probe_interval_ms);
    return -EINVAL;
  }
  if (c->train.warmup_steps > c->train.steps) {
    ea_seterr(err, errlen, "train.warmup_steps: %u is greater than train.steps (%llu)",
              c->train.warmup_steps, (unsigned long long)c->train.steps);
    return -EINVAL;
  }
#ifndef EA_HAVE_NCCL
  if (strcmp(c->distributed.backend, "nccl") == 0) {
    ea_seterr(err, errlen,
              "distributed.backend: nccl was not built in (no CUDA/NCCL at build time)");
    return -ENOTSUP;
  }
#endif
  return 0;
}

/* ---- dump and hash ------------------------------------------------------ */

/* Output goes to a bounded buffer (snprintf-style: the length is counted
 * even past cap) and/or into a running XXH3. */
typedef struct {
  char *buf;
  size_t cap, len;
  XXH3_state_t *h;
} sink;

static void put(sink *o, const char *s, size_t n) {
  if (o->h) XXH3_64bits_update(o->h, s, n);
  if (o->buf && o->len < o->cap) {
    size_t room = o->cap - o->len;
    memcpy(o->buf + o->len, s, n < room ? n : room);
  }
  o->len += n;
}

static void putf(sink *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(sink *o, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) put(o, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* The shortest %g that reads back as the same double. */
static void fmt_double(double v, char *out, size_t cap) {
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(out, cap, "%.*g", prec, v);
    if (strtod(out, NULL) == v) return;
  }
}

/* One value as a YAML scalar that reloads to the same bytes.  Strings are
 * always double-quoted ("", "yes", "12" and "a: b" stay strings). */
static void put_value(sink *o, const cfg_key *k, const ea_config *c) {
  const void *f = ea__cfg_cfield(c, k);
  char tmp[64];
  switch (k->type) {
    case T_U32:
      putf(o, "%u", *(const uint32_t *)f);
      return;
    case T_U64:
      putf(o, "%llu", (unsigned long long)*(const uint64_t *)f);
      return;
    case T_BOOL:
      putf(o, "%s", *(const bool *)f ? "true" : "false");
      return;
    case T_DOUBLE:
      fmt_double(*(const double *)f, tmp, sizeof tmp);
      putf(o, "%s", tmp);
      return;
    case T_ENUM:
      putf(o, "%.*s", (int)strnlen(f, k->size), (const char *)f);
      return;
    case T_STR: {
      /* Characters YAML does not allow in a stream (C0/C1 controls, DEL,
       * U+FFFE/U+FFFF) are escaped, and so are the ones YAML 1.1 reads as
       * line breaks (U+2028/U+2029: raw, a quoted scalar folds them into a
       * space); so are bytes that are not UTF-8, which only code can put
       * here (load and set refuse them). */
      const unsigned char *s = f;
      size_t n = strnlen(f, k->size), run = 0;
      put(o, "\"", 1);
      for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        size_t l = utf8_next(s + i, n - i, &cp);
        char esc[16] = "";
        if (l == 0)
          snprintf(esc, sizeof esc, "\\x%02x", s[i]), l = 1;
        else if (cp == '"')
          snprintf(esc, sizeof esc, "\\\"");
        else if (cp == '\\')
          snprintf(esc, sizeof esc, "\\\\");
        else if (cp == '\n')
          snprintf(esc, sizeof esc, "\\n");
        else if (cp == '\t')
          snprintf(esc, sizeof esc, "\\t");
        else if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 ||
                 cp == 0xfffe || cp == 0xffff)
          snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp);
        if (!esc[0]) {
          run += l, i += l;
          continue;
        }
        put(o, (const char *)s + i - run, run);
        run = 0;
        put(o, esc, strlen(esc));
        i += l;
      }
      put(o, (const char *)s + n - run, run);
      put(o, "\"", 1);
      return;
    }
  }
}

/* "milliseconds, 10..60000", "one of auto, tcp, nccl", "true or false", … */
static void put_rule(sink *o, const cfg_key *k) {
  char expect[160];
  switch (k->type) {
    case T_U32:
    case T_U64:
      if (k->min == 0 && k->max == UINT64_MAX) {
        putf(o, "any 64-bit unsigned integer");
        return;
      }
      if (k->flags & F_ZERO_OFF)
        snprintf(expect, sizeof expect, "0 (off) or %llu..%llu", (unsigned long long)k->min,
                 (unsigned long long)k->max);
      else
        snprintf(expect, sizeof expect, "%llu..%llu", (unsigned long long)k->min,
                 (unsigned long long)k->max);
      putf(o, "%s, %s", k->unit ? k->unit : "integer", expect);
      return;
    case T_DOUBLE:
      putf(o, "%s, %c%g, %g]", k->unit ? k->unit : "number", (k->flags & F_MIN_OPEN) ? '(' : '[',
           k->dmin, k->dmax);
      return;
    case T_BOOL:
      putf(o, "true or false");
      return;
    case T_ENUM:
      ea__cfg_enum_expect(k, expect, sizeof expect);
      putf(o, "%s", expect);
      return;
    case T_STR:
      putf(o, "string, %s%zu bytes at most", (k->flags & F_NONEMPTY) ? "not empty, " : "",
           k->size - 1);
      return;
  }
}

int ea_config_dump(const ea_config *c, char *buf, size_t cap) {
  ea_config *def = malloc(sizeof *def);
  if (!def) return -ENOMEM;
  ea_config_default(def);
  sink o = {.buf = buf, .cap = cap};
  putf(&o,
       "# elastic-agent job configuration: every key, grouped by section.\n"
       "# Above each key: what it does, then its unit and range, and its default.\n");
  for (size_t i = 0; i < ea__cfg_nkeys; i++) {
    const cfg_key *k = &ea__cfg_keys[i];
    if (k->flags & OTHER_NAME) continue;
    if (i == 0 || strcmp(ea__cfg_keys[i - 1].section, k->section) != 0)
      putf(&o, "\n%s:\n", k->section);
    else
      put(&o, "\n", 1);
    putf(&o, "  # %s", k->doc);
    for (size_t j = 0; j < ea__cfg_nkeys; j++)
      if ((ea__cfg_keys[j].flags & F_SYNONYM) && strcmp(ea__cfg_keys[j].section, k->section) == 0 &&
          strcmp(ea__cfg_keys[j].alias, k->key) == 0)
        putf(&o, " Also named %s.", ea__cfg_keys[j].key);
    put(&o, "\n  # ", 5);
    put_rule(&o, k);
    put(&o, "; default ", 10);
    put_value(&o, k, def);
    putf(&o, "\n  %s: ", k->key);
    put_value(&o, k, c);
    put(&o, "\n", 1);
  }
  free(def);
  if (buf && cap) buf[o.len < cap ? o.len : cap - 1] = 0;
  return o.len > INT32_MAX ? -EOVERFLOW : (int)o.len;
}

/* XXH3-64 of the canonical form: "section.key=value\n" for every key in
 * table order, values written as in the dump.  Comments, defaults and
 * layout are left out, so rewording a doc string does not change the hash
 * of a configuration. */
uint64_t ea_config_hash(const ea_config *c) {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  sink o = {.h = &st};
  for (size_t i = 0; i < ea__cfg_nkeys; i++) {
    if (ea__cfg_keys[i].flags & OTHER_NAME) continue;
    putf(&o, "%s.%s=", ea__cfg_keys[i].section, ea__cfg_keys[i].key);
    put_value(&o, &ea__cfg_keys[i], c);
    put(&o, "\n", 1);
  }
  return XXH3_64bits_digest(&st);
}

/* ---- what a mode does not use, and old names ----------------------------- */

int ea_config_deprecations(const ea_config *c, char *out, size_t cap) {
  int n = 0;
  size_t len = 0;
  if (cap) out[0] = 0;
  for (size_t i = 0; i < ea__cfg_nkeys; i++) {
    const cfg_key *k = &ea__cfg_keys[i];
    if (!(k->flags & F_ALIAS) || !(c->aliases_used & ea__cfg_alias_bit(k))) continue;
    int w = snprintf(out + len, cap > len ? cap - len : 0, "%s%s.%s is the old name of %s.%s",
                     n ? "; " : "", k->section, k->key, k->section, k->alias);
    if (w > 0) len += (size_t)w < (cap > len ? cap - len : 0) ? (size_t)w : 0;
    n++;
  }
  return n;
}

int ea_config_changed_keys(const ea_config *c, const char *section, char *out, size_t cap) {
  ea_config *def = malloc(sizeof *def);
  if (!def) return -ENOMEM;
  ea_config_default(def);
  int n = 0;
  size_t len = 0;
  if (cap) out[0] = 0;
  for (size_t i = 0; i < ea__cfg_nkeys; i++) {
    const cfg_key *k = &ea__cfg_keys[i];
    if ((k->flags & OTHER_NAME) || strcmp(k->section, section) != 0) continue;
    if (memcmp(ea__cfg_cfield(c, k), ea__cfg_cfield(def, k), k->size) == 0) continue;
    int w = snprintf(out + len, cap > len ? cap - len : 0, "%s%s.%s", n ? ", " : "", k->section,
                     k->key);
    if (w > 0 && (size_t)w < (cap > len ? cap - len : 0)) len += (size_t)w;
    n++;
  }
  free(def);
  return n;
}
