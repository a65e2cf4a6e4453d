/* ea_json.h — JSON documents on jansson: the agent's answers (the `status`
 * document, `drain`, `help`, errors on the admin socket) and the CLI's
 * reading of them (base/json.c; tests/unit/test_json.c).
 *
 * jansson does the grammar, the escaping and the UTF-8 checks; this adds
 * typed setters that survive running out of memory, strings from the
 * network made valid UTF-8, reals printed like "%.Nf", exact 64-bit
 * counters, and a small read-only DOM for printing a document for people.
 */
#ifndef EA_JSON_H
#define EA_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Writing: a document is a jansson value; build it with the ea_jb_*
 * setters, which tolerate running out of memory anywhere: the first
 * failure sets b->oom, later calls still release what they are handed, and
 * the builder checks b->oom once at the end. */

typedef struct {
  bool oom; /* something could not be allocated: the document has holes */
} ea_jb;

/* Set key of object o to v (append v to array o when key is NULL), taking
 * v's reference.  v NULL (a constructor ran out of memory), o NULL or a
 * failed set: b->oom. */
void ea_jb_set(ea_jb *b, json_t *o, const char *key, json_t *v);
/* A new empty object / array set at key of o (appended when key is NULL);
 * borrowed (o holds it); NULL once b->oom. */
json_t *ea_jb_obj(ea_jb *b, json_t *o, const char *key);
json_t *ea_jb_arr(ea_jb *b, json_t *o, const char *key);
/* Typed setters (key NULL: append to the array o).  Strings may be any
 * bytes (member names come from the network): invalid UTF-8 becomes
 * U+FFFD, NULL is "".  u64 is exact up to INT64_MAX (a real past it, which
 * no counter reaches).  fixed is a
 * real rounded to `decimals` places like printf's "%.Nf" (N ≤ 6), null
 * when not finite; it prints without trailing zeros. */
void ea_jb_str(ea_jb *b, json_t *o, const char *key, const char *s);
void ea_jb_u64(ea_jb *b, json_t *o, const char *key, uint64_t v);
void ea_jb_int(ea_jb *b, json_t *o, const char *key, int64_t v);
void ea_jb_bool(ea_jb *b, json_t *o, const char *key, bool v);
void ea_jb_fixed(ea_jb *b, json_t *o, const char *key, double v, int decimals);
void ea_jb_null(ea_jb *b, json_t *o, const char *key);
/* {"error": msg}, or NULL when out of memory. */
json_t *ea_json_error(const char *msg);
/* doc as one line of compact JSON ("k":v, no spaces), malloc'd and
 * NUL-terminated, free() it; NULL when out of memory. */
char *ea_json_dump(const json_t *doc);

/* Reading (the CLI): a read-only DOM of a parsed document. */

typedef enum { EA_J_NULL, EA_J_BOOL, EA_J_NUM, EA_J_STR, EA_J_ARR, EA_J_OBJ } ea_jtype;

typedef struct ea_json {
  ea_jtype type;
  char *key;  /* name of this value inside its object, else NULL */
  char *text; /* STR: the string; NUM: its literal as our writer prints it;
                 BOOL/NULL: "true", "false", "null" */
  bool b;
  double num;
  struct ea_json *child, *next; /* first element/member, next sibling */
  size_t n;                     /* number of elements/members */
} ea_json;

/* Parse one JSON document (nesting ≤ 64).  Returns 0 or -EINVAL with a
 * message naming the offset (or -ENOMEM). */
int ea_json_parse(const char *s, size_t len, ea_json **out, char *err, size_t errlen);
void ea_json_free(ea_json *j);
/* Look up a dotted path of object keys ("counters.transport.packets_in"). */
const ea_json *ea_json_get(const ea_json *j, const char *path);
/* A string (or a number's literal, or "true"/"false"/"null") at path. */
const char *ea_json_str(const ea_json *j, const char *path, const char *dflt);
double ea_json_num(const ea_json *j, const char *path, double dflt);

#endif
