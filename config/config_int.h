/* config_int.h — what the job file's two halves share.
 *
 * keys.c holds the key table and everything about one key: its row, what
 * it accepts, how a value is parsed and described, and the defaults.
 * config.c holds the walks over the table: the YAML loader, --set,
 * validate, the dump and the hash.  This header is the little between
 * them: the row type, the table, and the per-key helpers both use. */
#ifndef EA_CONFIG_INT_H
#define EA_CONFIG_INT_H

#include "ea_config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { T_U32, T_U64, T_BOOL, T_DOUBLE, T_STR, T_ENUM } cfg_type;

enum {
  F_ZERO_OFF = 1u << 0, /* integer: 0 (= off) is allowed besides min..max */
  F_NONEMPTY = 1u << 1, /* string: "" is not allowed */
  F_MIN_OPEN = 1u << 2, /* double: the lower bound is exclusive */
  F_ALIAS = 1u << 3,    /* an old name of the key `alias`: loads and sets the
                           same field, not dumped, hashed or documented */
  F_SYNONYM = 1u << 4,  /* another documented name of the key `alias` (the
                           deployment guide's vocabulary): like F_ALIAS, but
                           named in that key's description and never warned
                           about */
  F_URI = 1u << 5,      /* string: a plain path or a file:// URI, stored as a
                           path; any other scheme is refused by name */
};

typedef struct {
  const char *section, *key;
  cfg_type type;
  size_t off, size;
  uint64_t min, max; /* T_U32, T_U64 */
  double dmin, dmax; /* T_DOUBLE */
  unsigned flags;
  const char *const *choices; /* T_ENUM: NULL-terminated */
  /* T_STR: extra syntax check; returns NULL or what is wrong. */
  const char *(*check)(const char *s);
  const char *unit;  /* "milliseconds", "bytes", … or NULL */
  const char *doc;   /* one sentence, shown in the dump and the reference */
  const char *alias; /* F_ALIAS, F_SYNONYM: the key (same section) this name stands for */
} cfg_key;

#define OTHER_NAME (F_ALIAS | F_SYNONYM)

/* The table (keys.c), in dump order, and its length. */
extern const cfg_key ea__cfg_keys[];
extern const size_t ea__cfg_nkeys;
/* At least ea__cfg_nkeys (keys.c checks it): sizes the loader's per-key
 * arrays on the stack. */
#define EA__CFG_NKEYS_MAX 256

static inline void *ea__cfg_field(ea_config *c, const cfg_key *k) {
  return (char *)c + k->off;
}
static inline const void *ea__cfg_cfield(const ea_config *c, const cfg_key *k) {
  return (const char *)c + k->off;
}

/* Names: is s[0..len) a section; the row of SECTION.KEY (NULL: none); the
 * row a name stands for (itself, or the key an alias names). */
bool ea__cfg_section_known(const char *s, size_t len);
const cfg_key *ea__cfg_find_key(const char *section, const char *key);
const cfg_key *ea__cfg_canonical(const cfg_key *k);
/* Old names: the bit of an alias row in ea_config.aliases_used, and setting
 * it when k is an alias. */
uint32_t ea__cfg_alias_bit(const cfg_key *k);
void ea__cfg_note_alias(ea_config *c, const cfg_key *k);
/* "unknown section (did you mean …?)" / "unknown key …" into why. */
void ea__cfg_unknown_section_msg(const char *name, char *why, size_t len);
void ea__cfg_unknown_key_msg(const char *section, const char *key, char *why, size_t len);

/* What a key accepts, as a phrase ("an integer in 10..60000", "one of …"),
 * and whether a value is in it. */
void ea__cfg_int_expect(const cfg_key *k, char *out, size_t cap);
void ea__cfg_dbl_expect(const cfg_key *k, char *out, size_t cap);
void ea__cfg_enum_expect(const cfg_key *k, char *out, size_t cap);
bool ea__cfg_int_ok(const cfg_key *k, uint64_t v);
bool ea__cfg_dbl_ok(const cfg_key *k, double v);
/* A string value's rules: NULL when fine, else what is wrong. */
const char *ea__cfg_str_problem(const cfg_key *k, const char *s, size_t len, char *why, size_t cap,
                                bool *expectation);
/* Parse one scalar for key k and store it into c; -EINVAL and why on error,
 * c untouched. */
int ea__cfg_parse_into(ea_config *c, const cfg_key *k, const char *s, size_t len, bool quoted,
                       bool is_null, char *why, size_t cap);

#endif
