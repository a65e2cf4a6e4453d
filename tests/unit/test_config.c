/* Check suite for the job-file loader (config/config.c).
 *
 * What the loader promises, tested as such: the defaults are sane and pass
 * validation; examples/job.yaml names every key and loads to the defaults;
 * docs/config.md's key reference is exactly what the table says; every
 * class of bad input is refused with the exact "FILE:LINE: section.key:
 * problem" line (line numbers asserted) and leaves the configuration
 * untouched; --set overrides; dump → load gives back the same bytes and
 * hash; the hash moves when any single key moves.  A seeded mutation test
 * (EA_SEED=… to replay) checks that any damaged file is either loaded and
 * round-trips, or refused with a well-formed one-line message.
 *
 * Run from the repository root (tests/run.sh does).  EA_UPDATE_DOCS=1
 * rewrites the generated part of docs/config.md instead of comparing it. */
#include "ea_config.h"

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char g_dir[64];
static char g_path[128];

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ea-test-config-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
  snprintf(g_path, sizeof g_path, "%s/job.yaml", g_dir);
}

static void teardown(void) {
  unlink(g_path);
  rmdir(g_dir);
}

static void write_text(const char *path, const char *text, size_t len) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(text, 1, len, f), len);
  ck_assert_int_eq(fclose(f), 0);
}

static void write_job(const char *text) {
  write_text(g_path, text, strlen(text));
}

static char *read_text(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s (tests run from the repository root)", path);
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  ck_assert_int_ge(n, 0);
  rewind(f);
  char *buf = malloc((size_t)n + 1);
  ck_assert_ptr_nonnull(buf);
  ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = 0;
  fclose(f);
  if (len) *len = (size_t)n;
  return buf;
}

static char *dump_alloc(const ea_config *c) {
  int n = ea_config_dump(c, NULL, 0);
  ck_assert_int_gt(n, 0);
  char *buf = malloc((size_t)n + 1);
  ck_assert_ptr_nonnull(buf);
  ck_assert_int_eq(ea_config_dump(c, buf, (size_t)n + 1), n);
  ck_assert_uint_eq(strlen(buf), (size_t)n);
  return buf;
}

static ea_config *cfg_new(void) {
  ea_config *c = malloc(sizeof *c);
  ck_assert_ptr_nonnull(c);
  ea_config_default(c);
  return c;
}

/* ---- the key list, read back from the dump -------------------------------
 * The table is private to config/ (keys.c); its public face is the dump, which
 * lists every key with its description, rule and default.  The docs and
 * example checks are built on that, so they follow the table by
 * construction. */

typedef struct {
  char section[32], key[64], doc[256], rule[160], def[128], value[160];
} key_info;

/* Copy n bytes and terminate; the field must be big enough. */
static void scopy(char *dst, size_t cap, const char *src, size_t n) {
  ck_assert_uint_lt(n, cap);
  memcpy(dst, src, n);
  dst[n] = 0;
}

static size_t dump_keys(const char *dump, key_info *out, size_t cap) {
  size_t n = 0, ncomment = 0;
  char section[32] = "", doc[256] = "", rule[256] = "";
  for (const char *p = dump; *p;) {
    const char *eol = strchr(p, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    const char *line = p;
    p += len + (eol != NULL);
    if (len && line[0] != ' ' && line[0] != '#' && line[len - 1] == ':') {
      scopy(section, sizeof section, line, len - 1);
      ncomment = 0;
    } else if (len > 4 && strncmp(line, "  # ", 4) == 0) {
      if (ncomment++ == 0)
        scopy(doc, sizeof doc, line + 4, len - 4);
      else
        scopy(rule, sizeof rule, line + 4, len - 4);
    } else if (len > 2 && strncmp(line, "  ", 2) == 0 && line[2] != ' ') {
      const char *colon = strstr(line, ": ");
      ck_assert_msg(colon && colon < line + len, "odd dump line: %.*s", (int)len, line);
      ck_assert_uint_lt(n, cap);
      ck_assert_int_eq(ncomment, 2);
      key_info *k = &out[n++];
      scopy(k->section, sizeof k->section, section, strlen(section));
      scopy(k->key, sizeof k->key, line + 2, (size_t)(colon - line - 2));
      scopy(k->value, sizeof k->value, colon + 2, (size_t)(line + len - colon - 2));
      scopy(k->doc, sizeof k->doc, doc, strlen(doc));
      const char *d = strstr(rule, "; default ");
      ck_assert_msg(d != NULL, "rule line without default: %s", rule);
      scopy(k->rule, sizeof k->rule, rule, (size_t)(d - rule));
      scopy(k->def, sizeof k->def, d + 10, strlen(d + 10));
      ncomment = 0;
    } else {
      ncomment = 0;
    }
  }
  return n;
}

#define MAX_KEYS 128

/* ---- defaults ------------------------------------------------------------ */

START_TEST(defaults_are_documented_and_valid) {
  ea_config *c = cfg_new();
  char err[512] = "";
  ck_assert_msg(ea_config_validate(c, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(c->experiment.name, "default");
  ck_assert_uint_eq(c->experiment.seed, 1234);
  ck_assert_uint_eq(c->compute.min_nodes, 1);
  ck_assert_uint_eq(c->compute.max_nodes, 64);
  ck_assert_uint_eq(c->compute.workers_per_node, 1);
  ck_assert_str_eq(c->compute.worker_command, "");
  ck_assert_str_eq(c->distributed.backend, "auto");
  ck_assert_uint_eq(c->distributed.global_batch, 64);
  ck_assert_uint_eq(c->distributed.micro_batch, 16);
  ck_assert_uint_eq(c->distributed.communication_timeout_seconds, 10);
  ck_assert_str_eq(c->distributed.quorum, "majority");
  ck_assert_uint_eq(c->distributed.scale_up_delay_ms, 2000);
  ck_assert_str_eq(c->checkpoint.dir, "");
  ck_assert_uint_eq(c->checkpoint.save_interval_steps, 100);
  ck_assert(c->checkpoint.resume_from_last);
  ck_assert_uint_eq(c->checkpoint.keep_last, 3);
  ck_assert_str_eq(c->checkpoint.verify_on_resume, "full");
  ck_assert_str_eq(c->checkpoint.busy_policy, "wait");
  ck_assert_str_eq(c->logging.level, "info");
  ck_assert_str_eq(c->logging.format, "text");
  ck_assert_str_eq(c->logging.file, "");
  ck_assert_str_eq(c->compute.protocol, "auto");
  ck_assert_uint_eq(c->runtime.max_restarts, 3);
  ck_assert_uint_eq(c->runtime.rendezvous_timeout_seconds, 30);
  ck_assert_uint_eq(c->runtime.join_retry_max_ms, 5000);
  ck_assert_uint_eq(c->runtime.stop_grace_seconds, 5);
  ck_assert_uint_eq(c->runtime.lost_peer_grace_ms, 500);
  ck_assert_uint_eq(c->aliases_used, 0);
  ea_swim_config swim;
  ea_swim_config_default(&swim);
  ck_assert_int_eq(memcmp(&c->membership, &swim, sizeof swim), 0);
  ck_assert_str_eq(c->observability.metrics_listen, "127.0.0.1:9400");
  ck_assert(c->observability.alert_on_nan);
  ck_assert(c->observability.straggler_factor == 2.0);
  ck_assert_str_eq(c->train.model, "byte-mlp");
  ck_assert_str_eq(c->train.data, "/usr/share/common-licenses");
  ck_assert_uint_eq(c->train.context, 16);
  ck_assert_uint_eq(c->train.embed_dim, 24);
  ck_assert_uint_eq(c->train.hidden, 256);
  ck_assert_uint_eq(c->train.layers, 2);
  ck_assert_uint_eq(c->train.steps, 2000);
  ck_assert(c->train.lr == 3e-3);
  ck_assert(c->train.weight_decay == 0.01);
  ck_assert_uint_eq(c->train.warmup_steps, 50);
  /* Same call, same bytes: configs compare with memcmp. */
  ea_config *d = cfg_new();
  ck_assert_int_eq(memcmp(c, d, sizeof *c), 0);
  free(c);
  free(d);
}
END_TEST

/* Every membership key is an ea_swim_config field with the same name. */
START_TEST(membership_keys_are_swim_fields) {
  ea_config *c = cfg_new();
  char *dump = dump_alloc(c);
  key_info *keys = calloc(MAX_KEYS, sizeof *keys);
  size_t n = dump_keys(dump, keys, MAX_KEYS);
  const char *want[] = {"probe_interval_ms",     "probe_timeout_ms",   "indirect_checks",
                        "suspicion_mult",        "suspicion_max_mult", "retransmit_mult",
                        "awareness_max",         "gossip_interval_ms", "gossip_nodes",
                        "push_pull_interval_ms", "dead_reclaim_ms",    "reconnect_interval_ms",
                        "reconnect_timeout_ms",  "max_packet"};
  size_t got = 0;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(keys[i].section, "membership") != 0) continue;
    ck_assert_uint_lt(got, sizeof want / sizeof want[0]);
    ck_assert_str_eq(keys[i].key, want[got]);
    got++;
  }
  ck_assert_uint_eq(got, sizeof want / sizeof want[0]);
  /* ea_swim_config has exactly these fourteen uint32_t fields. */
  ck_assert_uint_eq(sizeof(ea_swim_config), got * sizeof(uint32_t));
  char err[256];
  ck_assert_int_eq(ea_config_set(c, "membership.max_packet", "512", err, sizeof err), 0);
  ck_assert_uint_eq(c->membership.max_packet, 512);
  free(keys);
  free(dump);
  free(c);
}
END_TEST

/* ---- examples/job.yaml and docs/config.md ----------------------------- */

START_TEST(example_has_every_key_and_loads_to_defaults) {
  ea_config *def = cfg_new(), *c = cfg_new();
  /* Start from something else, so "equals the defaults" proves the file
   * set every key rather than left them alone. */
  char err[512] = "";
  ck_assert_int_eq(ea_config_set(c, "compute.max_nodes", "7", err, sizeof err), 0);
  ck_assert_int_eq(ea_config_set(c, "train.lr", "0.5", err, sizeof err), 0);
  ck_assert_int_eq(ea_config_set(c, "logging.file", "/x", err, sizeof err), 0);
  int rc = ea_config_load(c, "examples/job.yaml", err, sizeof err);
  ck_assert_msg(rc == 0, "load: %s", err);
  ck_assert_int_eq(memcmp(c, def, sizeof *c), 0);
  ck_assert_uint_eq(ea_config_hash(c), ea_config_hash(def));
  ck_assert_msg(ea_config_validate(c, err, sizeof err) == 0, "%s", err);

  /* Every key the table knows appears, under its section, in the file. */
  char *dump = dump_alloc(def);
  key_info *keys = calloc(MAX_KEYS, sizeof *keys);
  size_t n = dump_keys(dump, keys, MAX_KEYS);
  ck_assert_uint_eq(n, 77); /* the keys of include/ea_config.h, counted by hand */
  char *text = read_text("examples/job.yaml", NULL);
  for (size_t i = 0; i < n; i++) {
    char sec[64], line[128];
    snprintf(sec, sizeof sec, "\n%s:\n", keys[i].section);
    const char *s = strstr(text, sec);
    ck_assert_msg(s != NULL, "examples/job.yaml has no section %s", keys[i].section);
    const char *body = s + strlen(sec) - 1, *end = body;
    /* the section ends where a line starts with a name again */
    while ((end = strchr(end + 1, '\n')) && (end[1] == ' ' || end[1] == '\n' || end[1] == '#'))
      ;
    if (!end) end = body + strlen(body);
    snprintf(line, sizeof line, "\n  %s: ", keys[i].key);
    const char *k = strstr(body, line);
    ck_assert_msg(k && k < end, "examples/job.yaml: %s.%s is missing", keys[i].section,
                  keys[i].key);
    /* …with a comment right above it */
    const char *prev = k - 1;
    while (prev > body && *prev != '\n') prev--;
    ck_assert_msg(strncmp(prev, "\n  # ", 5) == 0, "examples/job.yaml: %s.%s has no comment",
                  keys[i].section, keys[i].key);
  }
  free(text);
  free(keys);
  free(dump);
  free(def);
  free(c);
}
END_TEST

#define DOCS_PATH "docs/config.md"
#define DOCS_BEGIN "<!-- BEGIN KEYS: generated from the key table by tests/unit/test_config.c -->\n"
#define DOCS_END "<!-- END KEYS -->\n"

static void md_cell(char *out, size_t cap, const char *s) {
  size_t n = 0;
  for (; *s && n + 3 < cap; s++) {
    if (*s == '|') out[n++] = '\\';
    out[n++] = *s;
  }
  out[n] = 0;
}

START_TEST(docs_reference_matches_table) {
  ea_config *def = cfg_new();
  char *dump = dump_alloc(def);
  key_info *keys = calloc(MAX_KEYS, sizeof *keys);
  size_t n = dump_keys(dump, keys, MAX_KEYS);
  size_t cap = 64 * 1024, len = 0;
  char *want = malloc(cap);
  ck_assert_ptr_nonnull(want);
  len += (size_t)snprintf(want + len, cap - len, "%s", DOCS_BEGIN);
  for (size_t i = 0; i < n; i++) {
    char doc[300], rule[200], d[160];
    if (i == 0 || strcmp(keys[i - 1].section, keys[i].section) != 0)
      len += (size_t)snprintf(want + len, cap - len,
                              "\n### %s\n\n| key | default | allowed | what it does |\n"
                              "|---|---|---|---|\n",
                              keys[i].section);
    md_cell(doc, sizeof doc, keys[i].doc);
    md_cell(rule, sizeof rule, keys[i].rule);
    md_cell(d, sizeof d, keys[i].def);
    len += (size_t)snprintf(want + len, cap - len, "| `%s.%s` | `%s` | %s | %s |\n",
                            keys[i].section, keys[i].key, d, rule, doc);
    ck_assert_uint_lt(len, cap);
  }
  len += (size_t)snprintf(want + len, cap - len, "\n%s", DOCS_END);

  size_t flen;
  char *docs = read_text(DOCS_PATH, &flen);
  char *b = strstr(docs, DOCS_BEGIN), *e = b ? strstr(b, DOCS_END) : NULL;
  ck_assert_msg(b && e, DOCS_PATH " lacks the generated-region markers");
  e += strlen(DOCS_END);
  const char *upd = getenv("EA_UPDATE_DOCS");
  if (upd && strcmp(upd, "1") == 0) {
    size_t head = (size_t)(b - docs), tail = flen - (size_t)(e - docs);
    char *out = malloc(head + len + tail);
    memcpy(out, docs, head);
    memcpy(out + head, want, len);
    memcpy(out + head + len, e, tail);
    write_text(DOCS_PATH, out, head + len + tail);
    free(out);
  } else {
    ck_assert_msg((size_t)(e - b) == len && memcmp(b, want, len) == 0, DOCS_PATH
                  " is out of date with the key table: run "
                  "EA_UPDATE_DOCS=1 build/tests/test_config and review the diff");
  }
  free(docs);
  free(want);
  free(keys);
  free(dump);
  free(def);
}
END_TEST

/* ---- the deployment guide's job file (issue 13) -------------------------
 * tests/data/guide_job.yaml is the guide's file as written, with its
 * storage:// URIs turned into file://@DIR@/… (@DIR@: a scratch directory). */

static void assert_roundtrip(const ea_config *c);

static char *guide_text(const char *dir) {
  char *t = read_text("tests/data/guide_job.yaml", NULL);
  size_t cap = strlen(t) + 16 * strlen(dir) + 1, o = 0;
  char *out = malloc(cap);
  ck_assert_ptr_nonnull(out);
  for (const char *p = t; *p;) {
    if (strncmp(p, "@DIR@", 5) == 0) {
      o += (size_t)snprintf(out + o, cap - o, "%s", dir);
      p += 5;
    } else {
      out[o++] = *p++;
    }
  }
  out[o] = 0;
  free(t);
  return out;
}

START_TEST(guide_job_file_loads_as_written) {
  char *text = guide_text(g_dir);
  ck_assert_ptr_nonnull(strstr(text, "  worker_nodes: 2\n")); /* the file as the guide has it */
  write_job(text);
  free(text);
  ea_config *c = cfg_new();
  char err[2048] = "", note[256], want[EA_PATH_MAX];
  ck_assert_msg(ea_config_load(c, g_path, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(ea_config_validate(c, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(c->experiment.name, "training_baseline_v1");
  ck_assert_uint_eq(c->compute.max_nodes, 2);        /* worker_nodes: the nodes the job wants */
  ck_assert_uint_eq(c->compute.min_nodes, 1);        /* elastic: starts with fewer */
  ck_assert_uint_eq(c->compute.workers_per_node, 4); /* accelerators_per_worker */
  ck_assert_str_eq(c->distributed.strategy, "collective_data_parallel");
  ck_assert_uint_eq(c->distributed.gradient_accumulation_steps, 8);
  ck_assert_uint_eq(c->distributed.communication_timeout_seconds, 1800);
  snprintf(want, sizeof want, "%s/experiments/training_baseline_v1/checkpoints", g_dir);
  ck_assert_str_eq(c->checkpoint.dir, want); /* storage_uri, file:// stripped */
  ck_assert_uint_eq(c->checkpoint.save_interval_steps, 500);
  ck_assert(c->checkpoint.resume_from_last);
  ck_assert_uint_eq(c->checkpoint.keep_last, 3); /* keep_last_checkpoints */
  ck_assert_uint_eq(c->logging.metrics_interval_steps, 20);
  snprintf(want, sizeof want, "%s/experiments/training_baseline_v1/logs", g_dir);
  ck_assert_str_eq(c->logging.dir, want);                         /* logs_uri */
  ck_assert_uint_eq(c->runtime.rendezvous_timeout_seconds, 1800); /* request_timeout_seconds */
  ck_assert_uint_eq(c->runtime.max_restarts, 2);                  /* failure_retry_times */
  ck_assert_uint_eq(c->runtime.health_check_interval_seconds, 30);
  ck_assert_uint_eq(c->observability.metrics_export_interval_seconds, 30);
  ck_assert(c->observability.alert_on_nan); /* alert_on_loss_nan */
  ck_assert(c->observability.alert_on_checkpoint_failure);
  /* The guide's names are documented names, not deprecated ones: only
   * failure_retry_times (an old name of ours) is warned about. */
  ck_assert_int_eq(ea_config_deprecations(c, note, sizeof note), 1);
  ck_assert_str_eq(note, "runtime.failure_retry_times is the old name of runtime.max_restarts");
  /* The dump names each synonym in its key's description, and reloads. */
  char *dump = dump_alloc(c);
  ck_assert_ptr_nonnull(strstr(dump, " Also named worker_nodes.\n"));
  ck_assert_ptr_nonnull(strstr(dump, " Also named storage_uri.\n"));
  ck_assert_ptr_null(strstr(dump, "\n  worker_nodes:"));
  free(dump);
  c->aliases_used = 0; /* not a key: the dump cannot carry it */
  assert_roundtrip(c);
  free(c);
}
END_TEST

/* storage_uri and logs_uri (and checkpoint.dir, logging.dir): plain paths
 * and file:// URIs; any other scheme is refused by name. */
static const struct {
  const char *value, *path, *problem;
} uris[] = {
    {"/mnt/ckpt/job7", "/mnt/ckpt/job7", NULL},
    {"ckpt/job7", "ckpt/job7", NULL},
    {"file:///mnt/ckpt/job7", "/mnt/ckpt/job7", NULL},
    {"FILE:///mnt/a%20b", "/mnt/a b", NULL},
    {"file://localhost/mnt/x", "/mnt/x", NULL},
    {"storage://experiments/x", NULL,
     "scheme storage:// is not supported: use a file:// URI or a plain path (an object store "
     "must be mounted and given as its mount point)"},
    {"s3://bucket/x", NULL,
     "scheme s3:// is not supported: use a file:// URI or a plain path (an object store must "
     "be mounted and given as its mount point)"},
    {"file://experiments/x", NULL,
     "file:// URI names the host 'experiments': write file:///ABSOLUTE/PATH or a plain path"},
    {"file:///a%2", NULL, "file:// URI has a '%' not followed by two hex digits"},
};

START_TEST(uri_keys_take_file_uris_and_paths) {
  static const char *const names[] = {"checkpoint.storage_uri", "checkpoint.dir",
                                      "logging.logs_uri", "logging.dir"};
  for (size_t n = 0; n < 4; n++) {
    ea_config *c = cfg_new();
    char err[512] = "", want[600];
    int rc = ea_config_set(c, names[n], uris[_i].value, err, sizeof err);
    const char *got = n < 2 ? c->checkpoint.dir : c->logging.dir;
    if (uris[_i].path) {
      ck_assert_msg(rc == 0, "%s=%s: %s", names[n], uris[_i].value, err);
      ck_assert_str_eq(got, uris[_i].path);
    } else {
      ck_assert_int_eq(rc, -EINVAL);
      snprintf(want, sizeof want, "--set: %s: %s", names[n], uris[_i].problem);
      ck_assert_str_eq(err, want);
      ck_assert_str_eq(got, "");
    }
    free(c);
  }
}
END_TEST

/* A file with several problems: every one, in file order, a line each;
 * the configuration untouched. */
START_TEST(every_problem_of_a_file_at_once) {
  write_job(
      "compute:\n"
      "  worker_nodes: two\n"
      "  gpus: 8\n"
      "distributed:\n"
      "  strategy: parameter_server\n"
      "  global_batch: 128\n"
      "checkpoint:\n"
      "  storage_uri: \"storage://experiments/x\"\n"
      "  keep_last: 2\n"
      "  keep_last_checkpoints: 3\n"
      "loging:\n"
      "  level: debug\n"
      "train:\n"
      "  lr: fast\n");
  ea_config *c = cfg_new(), *def = cfg_new();
  char err[4096] = "", want[4096];
  ck_assert_int_eq(ea_config_load(c, g_path, err, sizeof err), -EINVAL);
  const char *P = g_path;
  snprintf(want, sizeof want,
           "%s:2: compute.worker_nodes: expected an integer in 1..65536, found two\n"
           "%s:3: compute.gpus: unknown key\n"
           "%s:5: distributed.strategy: expected one of collective_data_parallel, found "
           "parameter_server\n"
           "%s:8: checkpoint.storage_uri: scheme storage:// is not supported: use a file:// URI "
           "or a plain path (an object store must be mounted and given as its mount point)\n"
           "%s:10: checkpoint.keep_last_checkpoints: duplicate key (first given on line 9 under "
           "another name)\n"
           "%s:11: loging: unknown section (did you mean logging?)\n"
           "%s:14: train.lr: expected a number in (0, 10], found fast",
           P, P, P, P, P, P, P);
  ck_assert_str_eq(err, want);
  ck_assert_int_eq(memcmp(c, def, sizeof *c), 0);
  /* A buffer too small for all of them keeps whole lines only. */
  char small[200];
  ck_assert_int_eq(ea_config_load(c, g_path, small, sizeof small), -EINVAL);
  size_t sl = strlen(small);
  ck_assert_uint_gt(sl, 0);
  ck_assert_int_eq(strncmp(small, want, sl), 0);
  ck_assert_int_eq(want[sl], '\n');
  ck_assert_ptr_nonnull(strstr(small, "compute.worker_nodes"));
  free(c);
  free(def);
}
END_TEST

/* A value quoted in a problem keeps it on its line: a double-quoted YAML
 * scalar folds its line breaks into the value (fuzz_config found this:
 * the URI's host held "\n" and the message broke into lines that did not
 * read PATH:LINE:). */
START_TEST(a_problem_stays_on_its_line) {
  write_job("checkpoint:\n  storage_uri: \"file:// :\n\n \n/x y\"\ntrain:\n  lr: \"a\n\nb\"\n");
  ea_config *c = cfg_new();
  char err[2048] = "", want[2048];
  ck_assert_int_eq(ea_config_load(c, g_path, err, sizeof err), -EINVAL);
  snprintf(want, sizeof want,
           "%s:2: checkpoint.storage_uri: file:// URI names the host ' :?"
           "?': write "
           "file:///ABSOLUTE/PATH or a plain path\n"
           "%s:7: train.lr: expected a number in (0, 10], found the quoted string \"a\\x0ab\"",
           g_path, g_path);
  ck_assert_str_eq(err, want);
  free(c);
}
END_TEST

/* ---- loading ------------------------------------------------------------- */

/* Files that leave every key at its default. */
static const char *const empty_files[] = {
    "",           "# nothing but comments\n\n# here\n",     "---\n", "--- ~\n", "{}\n",
    "compute:\n", "compute:\n  # min_nodes: 4\ntrain: ~\n",
};

START_TEST(empty_files_give_defaults) {
  const char *text = empty_files[_i];
  write_job(text);
  ea_config *c = cfg_new(), *def = cfg_new();
  char err[512] = "";
  ck_assert_msg(ea_config_load(c, g_path, err, sizeof err) == 0, "[%s]: %s", text, err);
  ck_assert_int_eq(memcmp(c, def, sizeof *c), 0);
  free(c);
  free(def);
}
END_TEST

/* runtime.failure_retry_times is the old name of runtime.max_restarts: it
 * loads and sets the same field, is remembered for one warning, is neither
 * dumped nor hashed, and giving both names is a duplicate. */
START_TEST(old_key_name_still_works) {
  ea_config *c = cfg_new(), *def = cfg_new();
  char err[512] = "", note[256];
  ck_assert_int_eq(ea_config_deprecations(c, note, sizeof note), 0);
  ck_assert_str_eq(note, "");
  write_job("runtime:\n  failure_retry_times: 7\n");
  ck_assert_msg(ea_config_load(c, g_path, err, sizeof err) == 0, "%s", err);
  ck_assert_uint_eq(c->runtime.max_restarts, 7);
  ck_assert_int_eq(ea_config_deprecations(c, note, sizeof note), 1);
  ck_assert_str_eq(note, "runtime.failure_retry_times is the old name of runtime.max_restarts");
  char *dump = dump_alloc(c);
  ck_assert_ptr_null(strstr(dump, "\n  failure_retry_times:"));
  ck_assert_ptr_nonnull(strstr(dump, "\n  max_restarts: 7\n"));
  free(dump);
  /* the same value under the new name hashes the same */
  ck_assert_int_eq(ea_config_set(def, "runtime.max_restarts", "7", err, sizeof err), 0);
  ck_assert_uint_eq(ea_config_hash(c), ea_config_hash(def));
  ck_assert_int_eq(ea_config_deprecations(def, note, sizeof note), 0);
  /* --set with the old name */
  ck_assert_int_eq(ea_config_set(def, "runtime.failure_retry_times", "9", err, sizeof err), 0);
  ck_assert_uint_eq(def->runtime.max_restarts, 9);
  ck_assert_int_eq(ea_config_deprecations(def, note, sizeof note), 1);
  /* both names in one file */
  ea_config *e = cfg_new();
  write_job("runtime:\n  max_restarts: 2\n  failure_retry_times: 5\n");
  ck_assert_int_eq(ea_config_load(e, g_path, err, sizeof err), -EINVAL);
  char want[600];
  snprintf(want, sizeof want,
           "%s:3: runtime.failure_retry_times: duplicate key (first given on line 2 under another "
           "name)",
           g_path);
  ck_assert_str_eq(err, want);
  ck_assert_uint_eq(e->runtime.max_restarts, 3);
  free(e);
  free(def);
  free(c);
}
END_TEST

/* ea_config_changed_keys names exactly the keys of a section that differ
 * from the defaults (what a launch mode warns about). */
START_TEST(changed_keys_of_a_section) {
  ea_config *c = cfg_new();
  char err[256], out[512];
  ck_assert_int_eq(ea_config_changed_keys(c, "train", out, sizeof out), 0);
  ck_assert_str_eq(out, "");
  ck_assert_int_eq(ea_config_set(c, "train.steps", "10", err, sizeof err), 0);
  ck_assert_int_eq(ea_config_set(c, "train.lr", "0.5", err, sizeof err), 0);
  ck_assert_int_eq(ea_config_set(c, "checkpoint.keep_last", "4", err, sizeof err), 0);
  ck_assert_int_eq(ea_config_changed_keys(c, "train", out, sizeof out), 2);
  ck_assert_str_eq(out, "train.steps, train.lr");
  ck_assert_int_eq(ea_config_changed_keys(c, "checkpoint", out, sizeof out), 1);
  ck_assert_str_eq(out, "checkpoint.keep_last");
  /* set back to the default: no longer changed */
  ck_assert_int_eq(ea_config_set(c, "train.lr", "0.003", err, sizeof err), 0);
  ck_assert_int_eq(ea_config_changed_keys(c, "train", out, sizeof out), 1);
  ck_assert_int_eq(ea_config_changed_keys(c, "nosuch", out, sizeof out), 0);
  free(c);
}
END_TEST

START_TEST(load_overlays_only_given_keys) {
  ea_config *c = cfg_new();
  char err[512] = "";
  ck_assert_int_eq(ea_config_set(c, "train.steps", "77", err, sizeof err), 0);
  write_job(
      "experiment:\n"
      "  name: run-42           # plain\n"
      "  seed: 18446744073709551615\n"
      "compute: {min_nodes: 2, max_nodes: 8, workers_per_node: 8}\n"
      "distributed:\n"
      "  backend: \"tcp\"\n"
      "  quorum: 'none'\n"
      "checkpoint:\n"
      "  dir: /mnt/ckpt/run 42\n"
      "  resume_from_last: no\n"
      "  busy_policy: skip\n"
      "  verify_on_resume: size\n"
      "logging:\n"
      "  level: debug\n"
      "  format: json\n"
      "  file: |-\n"
      "    /var/log/agent.log\n"
      "observability:\n"
      "  alert_on_nan: Off\n"
      "  straggler_factor: 1.5\n"
      "  metrics_listen: \"[::1]:9400\"\n"
      "membership:\n"
      "  probe_interval_ms: 100\n"
      "  probe_timeout_ms: 40\n"
      "  push_pull_interval_ms: 0\n"
      "  max_packet: 1327\n"
      "train:\n"
      "  lr: 1e-4\n"
      "  weight_decay: 0\n");
  int rc = ea_config_load(c, g_path, err, sizeof err);
  ck_assert_msg(rc == 0, "%s", err);
  ck_assert_str_eq(c->experiment.name, "run-42");
  ck_assert_uint_eq(c->experiment.seed, UINT64_MAX);
  ck_assert_uint_eq(c->compute.min_nodes, 2);
  ck_assert_uint_eq(c->compute.max_nodes, 8);
  ck_assert_uint_eq(c->compute.workers_per_node, 8);
  ck_assert_str_eq(c->distributed.backend, "tcp");
  ck_assert_str_eq(c->distributed.quorum, "none");
  ck_assert_str_eq(c->checkpoint.dir, "/mnt/ckpt/run 42");
  ck_assert(!c->checkpoint.resume_from_last);
  ck_assert_str_eq(c->checkpoint.busy_policy, "skip");
  ck_assert_str_eq(c->checkpoint.verify_on_resume, "size");
  ck_assert_str_eq(c->logging.level, "debug");
  ck_assert_str_eq(c->logging.format, "json");
  ck_assert_str_eq(c->logging.file, "/var/log/agent.log");
  ck_assert(!c->observability.alert_on_nan);
  ck_assert(c->observability.straggler_factor == 1.5);
  ck_assert_str_eq(c->observability.metrics_listen, "[::1]:9400");
  ck_assert_uint_eq(c->membership.probe_interval_ms, 100);
  ck_assert_uint_eq(c->membership.probe_timeout_ms, 40);
  ck_assert_uint_eq(c->membership.push_pull_interval_ms, 0);
  ck_assert_uint_eq(c->membership.max_packet, 1327);
  ck_assert(c->train.lr == 1e-4);
  ck_assert(c->train.weight_decay == 0.0);
  /* Untouched keys keep what c held, defaults or an earlier override. */
  ck_assert_uint_eq(c->train.steps, 77);
  ck_assert_uint_eq(c->membership.indirect_checks, 3);
  ck_assert_str_eq(c->train.model, "byte-mlp");
  ck_assert_msg(ea_config_validate(c, err, sizeof err) == 0, "%s", err);
  free(c);
}
END_TEST

START_TEST(booleans_accept_yaml_words) {
  const char *yes[] = {"true", "True", "TRUE", "yes", "Yes", "on", "ON"};
  const char *no[] = {"false", "False", "no", "NO", "off", "Off"};
  char text[128], err[256];
  ea_config *c = cfg_new();
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    c->checkpoint.resume_from_last = false;
    snprintf(text, sizeof text, "checkpoint:\n  resume_from_last: %s\n", yes[i]);
    write_job(text);
    ck_assert_msg(ea_config_load(c, g_path, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(c->checkpoint.resume_from_last, "%s", yes[i]);
  }
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
    c->checkpoint.resume_from_last = true;
    snprintf(text, sizeof text, "checkpoint:\n  resume_from_last: %s\n", no[i]);
    write_job(text);
    ck_assert_msg(ea_config_load(c, g_path, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(!c->checkpoint.resume_from_last, "%s", no[i]);
  }
  free(c);
}
END_TEST

/* Every class of error, with the exact message after "FILE:". */
static const struct {
  const char *yaml, *msg;
} bad_files[] = {
    /* YAML syntax */
    {"compute:\n  min_nodes: 1\n max_nodes: 2\n",
     "3: syntax error: did not find expected key (while parsing a block mapping at line 1)"},
    {"compute:\n\tmin_nodes: 1\n",
     "2: syntax error: found character that cannot start any token "
     "(while scanning for the next token at line 2)"},
    {"compute: {min_nodes: 1\n\ntrain: {}\n",
     "3: syntax error: did not find expected ',' or '}' (while parsing a flow mapping at line 1)"},
    {"compute:\n  min_nodes: *n\n", "2: syntax error: found undefined alias"},
    {"experiment:\n  name: caf\xe9\n",
     "2: syntax error: incomplete UTF-8 octet sequence (byte 23)"},
    {"experiment:\n  name: x\n\n  \xff: 1\n",
     "4: syntax error: invalid leading UTF-8 octet (byte 25)"},
    /* shape */
    {"- compute\n- train\n", "1: expected a mapping of sections, found a sequence"},
    {"just words\n", "1: expected a mapping of sections, found a scalar"},
    {"? [compute]\n: {}\n", "1: expected a section name, found a sequence"},
    {"compute: 4\n", "1: compute: expected a mapping of keys, found a scalar"},
    {"train: {}\ncompute:\n  - min_nodes: 1\n",
     "3: compute: expected a mapping of keys, found a sequence"},
    {"compute:\n  ? {a: 1}\n  : 2\n", "2: compute: expected a key name, found a mapping"},
    {"compute:\n  min_nodes: [1, 2]\n",
     "2: compute.min_nodes: expected a single value, found a sequence"},
    {"compute:\n  min_nodes:\n    value: 1\n",
     "3: compute.min_nodes: expected a single value, found a mapping"},
    {"compute:\n  min_nodes: 1\n---\ncompute:\n  min_nodes: 2\n",
     "3: expected one YAML document, found another"},
    /* names */
    {"experiment:\n  name: a\ncomputer:\n  min_nodes: 2\n",
     "3: computer: unknown section (did you mean compute?)"},
    {"workers:\n  count: 2\n",
     "1: workers: unknown section (expected one of experiment, compute, distributed, "
     "checkpoint, logging, runtime, membership, observability, train)"},
    {"membership:\n  probe_interval: 100\n",
     "2: membership.probe_interval: unknown key (did you mean probe_interval_ms?)"},
    {"compute:\n  gpus: 8\n", "2: compute.gpus: unknown key"},
    {"train:\n  min_nodes: 2\n", "2: train.min_nodes: unknown key"},
    {"compute:\n  min_nodes: 1\n  max_nodes: 4\n\n  min_nodes: 2\n",
     "5: compute.min_nodes: duplicate key (first given on line 2)"},
    {"compute:\n  min_nodes: 1\ntrain:\n  steps: 5\ncompute:\n  max_nodes: 2\n",
     "5: compute: duplicate section (first given on line 1)"},
    /* integers */
    {"compute:\n  min_nodes: two\n",
     "2: compute.min_nodes: expected an integer in 1..65536, found two"},
    {"membership:\n  probe_interval_ms: -100\n",
     "2: membership.probe_interval_ms: expected an integer in 10..60000, found -100"},
    {"membership:\n\n  # faster probes\n  probe_interval_ms: 5\n",
     "4: membership.probe_interval_ms: expected an integer in 10..60000, found 5"},
    {"membership:\n  probe_interval_ms: 60001\n",
     "2: membership.probe_interval_ms: expected an integer in 10..60000, found 60001"},
    {"compute:\n  workers_per_node: 1.5\n",
     "2: compute.workers_per_node: expected an integer in 1..64, found 1.5"},
    {"compute:\n  workers_per_node: 0x10\n",
     "2: compute.workers_per_node: expected an integer in 1..64, found 0x10"},
    {"compute:\n  workers_per_node: \"8\"\n",
     "2: compute.workers_per_node: expected an integer in 1..64, found the quoted string \"8\""},
    {"compute:\n  min_nodes:\n  max_nodes: 4\n",
     "2: compute.min_nodes: expected an integer in 1..65536, found nothing"},
    {"distributed:\n  global_batch: 4294967296\n",
     "2: distributed.global_batch: expected an integer in 1..16777216, found 4294967296"},
    {"experiment:\n  seed: 18446744073709551616\n",
     "2: experiment.seed: expected an integer in 0..18446744073709551615, "
     "found 18446744073709551616"},
    {"membership:\n  push_pull_interval_ms: 500\n",
     "2: membership.push_pull_interval_ms: expected 0 (off) or an integer in 1000..86400000, "
     "found 500"},
    {"membership:\n  max_packet: 1328\n",
     "2: membership.max_packet: expected an integer in 512..1327, found 1328"},
    {"membership:\n  max_packet: 511\n",
     "2: membership.max_packet: expected an integer in 512..1327, found 511"},
    {"compute:\n  workers_per_node: 65\n",
     "2: compute.workers_per_node: expected an integer in 1..64, found 65"},
    {"compute:\n  min_nodes: 0\n",
     "2: compute.min_nodes: expected an integer in 1..65536, found 0"},
    {"distributed:\n  micro_batch: 0\n",
     "2: distributed.micro_batch: expected an integer in 1..16777216, found 0"},
    /* numbers */
    {"train:\n  lr: 0\n", "2: train.lr: expected a number in (0, 10], found 0"},
    {"train:\n  lr: -0.1\n", "2: train.lr: expected a number in (0, 10], found -0.1"},
    {"train:\n  lr: .nan\n", "2: train.lr: expected a number in (0, 10], found .nan"},
    {"train:\n  lr: 1e400\n", "2: train.lr: expected a number in (0, 10], found 1e400"},
    {"train:\n  lr: fast\n", "2: train.lr: expected a number in (0, 10], found fast"},
    {"train:\n  weight_decay: 1.01\n",
     "2: train.weight_decay: expected a number in [0, 1], found 1.01"},
    {"observability:\n  straggler_factor: 1\n",
     "2: observability.straggler_factor: expected a number in (1, 100], found 1"},
    /* booleans */
    {"checkpoint:\n  resume_from_last: 1\n",
     "2: checkpoint.resume_from_last: expected true or false (or yes/no, on/off), found 1"},
    {"observability:\n  alert_on_nan: \"true\"\n",
     "2: observability.alert_on_nan: expected true or false (or yes/no, on/off), "
     "found the quoted string \"true\""},
    /* enums */
    {"distributed:\n  backend: mpi\n",
     "2: distributed.backend: expected one of auto, tcp, nccl, found mpi"},
    {"distributed:\n  backend: TCP\n",
     "2: distributed.backend: expected one of auto, tcp, nccl, found TCP"},
    {"distributed:\n  quorum: all\n",
     "2: distributed.quorum: expected one of majority, none, found all"},
    {"logging:\n  level: verbose\n",
     "2: logging.level: expected one of debug, info, warn, error, found verbose"},
    {"logging:\n  format: xml\n", "2: logging.format: expected one of text, json, found xml"},
    {"checkpoint:\n  verify_on_resume: quick\n",
     "2: checkpoint.verify_on_resume: expected one of full, size, found quick"},
    {"checkpoint:\n  busy_policy: drop\n",
     "2: checkpoint.busy_policy: expected one of wait, skip, found drop"},
    {"checkpoint:\n  busy_policy:\n",
     "2: checkpoint.busy_policy: expected one of wait, skip, found nothing"},
    /* strings */
    {"experiment:\n  name: 0123456789012345678901234567890123456789012345678901234567890123\n",
     "2: experiment.name: too long: 64 bytes, at most 63"},
    {"experiment:\n  name: \"\"\n", "2: experiment.name: must not be empty"},
    {"train:\n  data:\n", "2: train.data: must not be empty"},
    {"experiment:\n  name: \"a\\0b\"\n", "2: experiment.name: contains a NUL byte"},
    {"observability:\n  metrics_listen: localhost\n",
     "2: observability.metrics_listen: expected HOST:PORT with PORT in 0..65535 "
     "(IPv6 as [::1]:9400), found localhost"},
    {"observability:\n  metrics_listen: \"::1:9400\"\n",
     "2: observability.metrics_listen: expected HOST:PORT with PORT in 0..65535 "
     "(IPv6 as [::1]:9400), found the quoted string \"::1:9400\""},
    {"observability:\n  metrics_listen: \"127.0.0.1:65536\"\n",
     "2: observability.metrics_listen: expected HOST:PORT with PORT in 0..65535 "
     "(IPv6 as [::1]:9400), found the quoted string \"127.0.0.1:65536\""},
    {"observability:\n  metrics_listen: \":9400\"\n",
     "2: observability.metrics_listen: expected HOST:PORT with PORT in 0..65535 "
     "(IPv6 as [::1]:9400), found the quoted string \":9400\""},
};

START_TEST(bad_file_exact_message) {
  const char *text = bad_files[_i].yaml;
  write_job(text);
  ea_config *c = cfg_new(), *before = cfg_new();
  char err[512] = "", want[640];
  snprintf(want, sizeof want, "%s:%s", g_path, bad_files[_i].msg);
  int rc = ea_config_load(c, g_path, err, sizeof err);
  ck_assert_msg(rc == -EINVAL, "case %d: rc %d (%s) for:\n%s", _i, rc, err, text);
  ck_assert_str_eq(err, want);
  ck_assert_ptr_null(strchr(err, '\n'));
  /* A refused file changes nothing, even keys it set before the error. */
  ck_assert_int_eq(memcmp(c, before, sizeof *c), 0);
  free(c);
  free(before);
}
END_TEST

START_TEST(error_after_good_keys_leaves_config_unchanged) {
  write_job("compute:\n  min_nodes: 3\n  max_nodes: 9\ntrain:\n  steps: 0\n");
  ea_config *c = cfg_new(), *before = cfg_new();
  char err[512];
  ck_assert_int_eq(ea_config_load(c, g_path, err, sizeof err), -EINVAL);
  char want[256];
  snprintf(want, sizeof want, "%s:5: train.steps: expected an integer in 1..1000000000000, found 0",
           g_path);
  ck_assert_str_eq(err, want);
  ck_assert_int_eq(memcmp(c, before, sizeof *c), 0);
  free(c);
  free(before);
}
END_TEST

START_TEST(unreadable_files) {
  ea_config *c = cfg_new();
  char err[512], want[256];
  snprintf(want, sizeof want, "%s/absent.yaml", g_dir);
  ck_assert_int_eq(ea_config_load(c, want, err, sizeof err), -ENOENT);
  strcat(want, ": cannot open: No such file or directory");
  ck_assert_str_eq(err, want);
  ck_assert_int_eq(ea_config_load(c, g_dir, err, sizeof err), -EISDIR);
  snprintf(want, sizeof want, "%s: cannot read: Is a directory", g_dir);
  ck_assert_str_eq(err, want);
  /* A small err buffer is truncated, never overrun. */
  char tiny[8];
  memset(tiny, 'x', sizeof tiny);
  ck_assert_int_eq(ea_config_load(c, "/nonexistent/job.yaml", tiny, sizeof tiny), -ENOENT);
  ck_assert_str_eq(tiny, "/nonexi");
  ck_assert_int_eq(ea_config_load(c, "/nonexistent/job.yaml", NULL, 0), -ENOENT);
  free(c);
}
END_TEST

START_TEST(oversized_file_refused) {
  size_t n = (1u << 20) + 1;
  char *big = malloc(n);
  memset(big, '#', n);
  big[n - 1] = '\n';
  write_text(g_path, big, n);
  free(big);
  ea_config *c = cfg_new();
  char err[512], want[256];
  ck_assert_int_eq(ea_config_load(c, g_path, err, sizeof err), -EFBIG);
  snprintf(want, sizeof want, "%s: file too large (more than 1048576 bytes)", g_path);
  ck_assert_str_eq(err, want);
  free(c);
}
END_TEST

/* Seconds since an arbitrary point (CLOCK_MONOTONIC). */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Loads text (len bytes) and returns the seconds it took; rc and err out. */
static double timed_load(const char *text, size_t len, int *rc, char *err, size_t errlen) {
  write_text(g_path, text, len);
  ea_config *c = cfg_new();
  double t0 = now_s();
  *rc = ea_config_load(c, g_path, err, errlen);
  double dt = now_s() - t0;
  free(c);
  return dt;
}

/* Issue 27 item 4: libyaml costs time quadratic in the nesting depth before
 * any error (200,000 levels of `[`, 400 KiB, took over 60 s), so the loader
 * refuses a file nested deeper than 64 levels before building it, at once
 * and naming the line and the limit; 64 levels still load (and fail on the
 * schema, as any sequence at the top does). */
START_TEST(deep_nesting_refused_at_once) {
  size_t depth = 200000, n = 2 * depth + 1;
  char *deep = malloc(n + 1);
  memset(deep, '[', depth);
  memset(deep + depth, ']', depth);
  deep[n - 1] = '\n';
  deep[n] = 0;
  char err[512], want[512];
  int rc;
  double dt = timed_load(deep, n, &rc, err, sizeof err);
  ck_assert_int_eq(rc, -EINVAL);
  snprintf(want, sizeof want,
           "%s:1: nested more than 64 levels deep (the limit; a job file needs 2)", g_path);
  ck_assert_str_eq(err, want);
  ck_assert_msg(dt < 1.0, "200,000 levels took %.2f s to refuse", dt);

  /* The boundary, block and flow mixed: the root mapping and `compute` are
   * two levels, then 62 (allowed) or 63 (refused) flow sequences. */
  for (size_t extra = 62; extra <= 63; extra++) {
    char text[512];
    size_t at = (size_t)snprintf(text, sizeof text, "compute:\n  min_nodes: ");
    memset(text + at, '[', extra);
    memset(text + at + extra, ']', extra);
    at += 2 * extra;
    text[at++] = '\n';
    text[at] = 0;
    timed_load(text, at, &rc, err, sizeof err);
    ck_assert_int_eq(rc, -EINVAL);
    if (extra == 62)
      snprintf(want, sizeof want,
               "%s:2: compute.min_nodes: expected a single value, found a sequence", g_path);
    else
      snprintf(want, sizeof want,
               "%s:2: nested more than 64 levels deep (the limit; a job file needs 2)", g_path);
    ck_assert_str_eq(err, want);
  }
  free(deep);
}
END_TEST

/* libyaml's composer checks each anchor against every earlier one, so 60,000
 * anchors took 25 s: more than 64 are refused before it runs. */
START_TEST(many_anchors_refused_at_once) {
  size_t count = 90000, cap = count * 16 + 64, at = 0;
  char *text = malloc(cap);
  at += (size_t)snprintf(text + at, cap - at, "x: [");
  for (size_t i = 0; i < count; i++)
    at += (size_t)snprintf(text + at, cap - at, "%s&a%zu 1", i ? "," : "", i);
  at += (size_t)snprintf(text + at, cap - at, "]\n");
  char err[512], want[512];
  int rc;
  double dt = timed_load(text, at, &rc, err, sizeof err);
  ck_assert_int_eq(rc, -EINVAL);
  snprintf(want, sizeof want, "%s:1: more than 64 anchors (&name) in one file (the limit)", g_path);
  ck_assert_str_eq(err, want);
  ck_assert_msg(dt < 1.0, "90,000 anchors took %.2f s to refuse", dt);

  /* 64 anchors get past the bound, to the schema. */
  at = (size_t)snprintf(text, cap, "x: [");
  for (int i = 0; i < 64; i++)
    at += (size_t)snprintf(text + at, cap - at, "%s&a%d 1", i ? "," : "", i);
  at += (size_t)snprintf(text + at, cap - at, "]\n");
  timed_load(text, at, &rc, err, sizeof err);
  ck_assert_int_eq(rc, -EINVAL);
  ck_assert_msg(strstr(err, ":1: x: unknown section"), "64 anchors: %s", err);
  free(text);
}
END_TEST

/* ---- --set ---------------------------------------------------------------- */

START_TEST(set_overrides) {
  ea_config *c = cfg_new();
  char err[512] = "";
#define SET_OK(k, v) ck_assert_msg(ea_config_set(c, k, v, err, sizeof err) == 0, "%s", err)
  SET_OK("membership.probe_interval_ms", "100");
  ck_assert_uint_eq(c->membership.probe_interval_ms, 100);
  SET_OK("experiment.name", "my run: \"quotes\" # not a comment");
  ck_assert_str_eq(c->experiment.name, "my run: \"quotes\" # not a comment");
  SET_OK("experiment.seed", "18446744073709551615");
  ck_assert_uint_eq(c->experiment.seed, UINT64_MAX);
  SET_OK("checkpoint.resume_from_last", "off");
  ck_assert(!c->checkpoint.resume_from_last);
  SET_OK("distributed.backend", "nccl");
  ck_assert_str_eq(c->distributed.backend, "nccl");
  SET_OK("train.lr", "2.5e-4");
  ck_assert(c->train.lr == 2.5e-4);
  SET_OK("observability.metrics_listen", "");
  ck_assert_str_eq(c->observability.metrics_listen, "");
  SET_OK("observability.metrics_listen", "127.0.0.1:0"); /* a free port, logged */
  ck_assert_str_eq(c->observability.metrics_listen, "127.0.0.1:0");
  SET_OK("runtime.stall_timeout_seconds", "4");
  ck_assert_uint_eq(c->runtime.stall_timeout_seconds, 4);
  SET_OK("logging.file", "yes"); /* a string key takes the word as written */
  ck_assert_str_eq(c->logging.file, "yes");
  SET_OK("membership.push_pull_interval_ms", "0");
  ck_assert_uint_eq(c->membership.push_pull_interval_ms, 0);
#undef SET_OK
  free(c);
}
END_TEST

static const struct {
  const char *key, *value, *msg;
} bad_sets[] = {
    {"membership.probe_interval_ms", "abc",
     "--set: membership.probe_interval_ms: expected an integer in 10..60000, found abc"},
    {"membership.probe_interval_ms", "",
     "--set: membership.probe_interval_ms: expected an integer in 10..60000, found nothing"},
    {"membership.probe_intervl_ms", "100",
     "--set: membership.probe_intervl_ms: unknown key (did you mean probe_interval_ms?)"},
    {"membrship.probe_interval_ms", "100",
     "--set: membrship.probe_interval_ms: unknown section (did you mean membership?)"},
    {"probe_interval_ms", "100", "--set: probe_interval_ms: expected SECTION.KEY=VALUE"},
    {".probe_interval_ms", "100", "--set: .probe_interval_ms: expected SECTION.KEY=VALUE"},
    {"compute.min_nodes", NULL, "--set: compute.min_nodes: missing value"},
    {"compute.min_nodes", " 2",
     "--set: compute.min_nodes: expected an integer in 1..65536, found  2"},
    {"distributed.quorum", "some",
     "--set: distributed.quorum: expected one of majority, none, found some"},
    {"checkpoint.resume_from_last", "2",
     "--set: checkpoint.resume_from_last: expected true or false (or yes/no, on/off), found 2"},
    {"train.lr", "inf", "--set: train.lr: expected a number in (0, 10], found inf"},
    {"train.model", "", "--set: train.model: must not be empty"},
    {"experiment.name", "caf\xe9", "--set: experiment.name: not valid UTF-8 (byte 3)"},
    {"logging.file", "\xed\xa0\x80", "--set: logging.file: not valid UTF-8 (byte 0)"},
};

START_TEST(set_errors_exact_message) {
  ea_config *c = cfg_new(), *before = cfg_new();
  char err[512] = "";
  int rc = ea_config_set(c, bad_sets[_i].key, bad_sets[_i].value, err, sizeof err);
  ck_assert_int_eq(rc, -EINVAL);
  ck_assert_str_eq(err, bad_sets[_i].msg);
  ck_assert_int_eq(memcmp(c, before, sizeof *c), 0);
  free(c);
  free(before);
}
END_TEST

/* ---- validate -------------------------------------------------------------- */

START_TEST(validate_cross_field) {
  ea_config *c = cfg_new();
  char err[512];
  c->compute.min_nodes = 8;
  c->compute.max_nodes = 4;
  ck_assert_int_eq(ea_config_validate(c, err, sizeof err), -EINVAL);
  ck_assert_str_eq(err, "compute.min_nodes: 8 is greater than compute.max_nodes (4)");
  c->compute.max_nodes = 8; /* equal is fine */
  ck_assert_int_eq(ea_config_validate(c, err, sizeof err), 0);

  c->distributed.micro_batch = 65;
  ck_assert_int_eq(ea_config_validate(c, err, sizeof err), -EINVAL);
  ck_assert_str_eq(err,
                   "distributed.micro_batch: 65 is greater than distributed.global_batch (64)");
  c->distributed.micro_batch = 64;
  ck_assert_int_eq(ea_config_validate(c, err, sizeof err), 0);

  c->membership.probe_timeout_ms = c->membership.probe_interval_ms = 200;
  ck_assert_int_eq(ea_config_validate(c, err, sizeof err), -EINVAL);
  ck_assert_str_eq(err,
                   "membership.probe_timeout_ms: 200 must be less than "
                   "membership.probe_interval_ms (200)");
  c->membership.probe_timeout_ms = 199;
  ck_assert_int_eq(ea_config_validate(c, err, sizeof err), 0);

  c->train.warmup_steps = 2001;
  ck_assert_int_eq(ea_config_validate(c, err, sizeof err), -EINVAL);
  ck_assert_str_eq(err, "train.warmup_steps: 2001 is greater than train.steps (2000)");
  c->train.warmup_steps = 2000;
  ck_assert_int_eq(ea_config_validate(c, err, sizeof err), 0);
  free(c);
}
END_TEST

/* validate also re-applies the per-key rules, for values set in code. */
START_TEST(validate_per_key) {
  ea_config *c = cfg_new();
  char err[512];
  c->compute.workers_per_node = 0;
  ck_assert_int_eq(ea_config_validate(c, err, sizeof err), -EINVAL);
  ck_assert_str_eq(err, "compute.workers_per_node: expected an integer in 1..64, found 0");
  ea_config_default(c);
  snprintf(c->distributed.backend, sizeof c->distributed.backend, "mpi");
  ck_assert_int_eq(ea_config_validate(c, err, sizeof err), -EINVAL);
  ck_assert_str_eq(err, "distributed.backend: expected one of auto, tcp, nccl, found \"mpi\"");
  ea_config_default(c);
  c->train.lr = NAN;
  ck_assert_int_eq(ea_config_validate(c, err, sizeof err), -EINVAL);
  ck_assert_str_eq(err, "train.lr: expected a number in (0, 10], found nan");
  ea_config_default(c);
  c->experiment.name[0] = 0;
  ck_assert_int_eq(ea_config_validate(c, err, sizeof err), -EINVAL);
  ck_assert_str_eq(err, "experiment.name: must not be empty");
  ea_config_default(c);
  memset(c->train.model, 'm', sizeof c->train.model);
  ck_assert_int_eq(ea_config_validate(c, err, sizeof err), -EINVAL);
  ck_assert_str_eq(err, "train.model: not NUL-terminated");
  free(c);
}
END_TEST

/* ---- dump and hash ------------------------------------------------------ */

static void assert_roundtrip(const ea_config *c) {
  char *dump = dump_alloc(c);
  write_text(g_path, dump, strlen(dump));
  /* Load over a base that differs everywhere it can: the dump must set
   * every key by itself. */
  ea_config *back = cfg_new();
  char err[512] = "";
  ck_assert_int_eq(ea_config_set(back, "compute.workers_per_node", "3", err, sizeof err), 0);
  ck_assert_int_eq(ea_config_set(back, "train.data", "/elsewhere", err, sizeof err), 0);
  ck_assert_int_eq(ea_config_set(back, "observability.alert_on_nan", "no", err, sizeof err), 0);
  int rc = ea_config_load(back, g_path, err, sizeof err);
  ck_assert_msg(rc == 0, "dump does not load: %s\n%s", err, dump);
  char *again = dump_alloc(back);
  ck_assert_str_eq(again, dump);
  ck_assert_uint_eq(ea_config_hash(back), ea_config_hash(c));
  ck_assert_int_eq(memcmp(back, c, sizeof *c), 0);
  free(again);
  free(back);
  free(dump);
}

START_TEST(dump_load_roundtrip) {
  ea_config *c = cfg_new();
  assert_roundtrip(c);
  char err[512] = "";
  const char *sets[][2] = {
      {"experiment.name", "a \"quoted\" name: with # and \\ and\ttab"},
      {"experiment.seed", "18446744073709551615"},
      {"compute.worker_command", "python3 -c 'print(1)'\n--flag=\x01"},
      {"compute.min_nodes", "2"},
      {"distributed.backend", "tcp"},
      /* ï ✓ NEL U+FFFE, and U+2028/U+2029, which YAML 1.1 reads as line
       * breaks (the long fuzz run found them dumped raw: reloaded as a space) */
      {"checkpoint.dir",
       "na\xc3\xafve \xe2\x9c\x93 \xc2\x85 \xef\xbf\xbe \xe2\x80\xa8\xe2\x80\xa9"},
      {"checkpoint.resume_from_last", "false"},
      {"logging.file", "yes"},
      {"train.model", "123"},
      {"train.data", "~"},
      {"observability.metrics_listen", ""},
      {"observability.straggler_factor", "1.0000000000000002"},
      {"train.lr", "0.1"},
      {"train.weight_decay", "1e-300"},
      {"membership.max_packet", "512"},
  };
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
    ck_assert_msg(ea_config_set(c, sets[i][0], sets[i][1], err, sizeof err) == 0, "%s", err);
  c->train.lr = 1.0 / 3.0; /* needs all 17 digits */
  assert_roundtrip(c);
  free(c);
}
END_TEST

START_TEST(dump_is_bounded_like_snprintf) {
  ea_config *c = cfg_new();
  char *full = dump_alloc(c);
  int n = (int)strlen(full);
  char small[100];
  memset(small, 'z', sizeof small);
  ck_assert_int_eq(ea_config_dump(c, small, sizeof small), n);
  ck_assert_uint_eq(strlen(small), sizeof small - 1);
  ck_assert_int_eq(memcmp(small, full, sizeof small - 1), 0);
  char one[1] = {'z'};
  ck_assert_int_eq(ea_config_dump(c, one, 1), n);
  ck_assert_int_eq(one[0], 0);
  ck_assert_ptr_nonnull(strstr(full, "\nmembership:\n"));
  ck_assert_ptr_nonnull(strstr(full, "\n  probe_interval_ms: 150\n"));
  free(full);
  free(c);
}
END_TEST

static bool is_number_rule(const key_info *k) {
  return k->rule[strlen(k->rule) - 1] == ']';
}

/* A value different from the default that the key's rule allows; false for
 * a choice of one (distributed.strategy), which has none. */
static bool other_value(const key_info *k, char *out, size_t cap) {
  if (strcmp(k->def, "true") == 0 || strcmp(k->def, "false") == 0) {
    snprintf(out, cap, "%s", strcmp(k->def, "true") == 0 ? "false" : "true");
  } else if (strcmp(k->def, "\"\"") == 0 && (strstr(k->key, "url") || strstr(k->key, "webhook"))) {
    snprintf(out, cap, "http://x"); /* the URL keys take URLs only */
  } else if (strcmp(k->def, "\"none\"") == 0) {
    snprintf(out, cap, "aws"); /* runtime.preemption_notice: a word from its list */
  } else if (k->def[0] == '"') {
    snprintf(out, cap, "x%.*s", (int)strlen(k->def) - 2, k->def + 1);
  } else if (strncmp(k->rule, "one of ", 7) == 0) {
    char list[160];
    snprintf(list, sizeof list, "%s", k->rule + 7);
    for (char *tok = strtok(list, ", "); tok; tok = strtok(NULL, ", "))
      if (strcmp(tok, k->def) != 0) {
        snprintf(out, cap, "%s", tok);
        return true;
      }
    return false;
  } else if (is_number_rule(k)) {
    snprintf(out, cap, "%.17g", strtod(k->def, NULL) * 0.5 + 0.75);
  } else {
    unsigned long long v = strtoull(k->def, NULL, 10);
    const char *dots = strstr(k->rule, "..");
    unsigned long long max = dots ? strtoull(dots + 2, NULL, 10) : ULLONG_MAX;
    snprintf(out, cap, "%llu", v < max ? v + 1 : v - 1);
  }
  return true;
}

START_TEST(hash_changes_with_every_key) {
  ea_config *def = cfg_new();
  uint64_t h0 = ea_config_hash(def);
  ck_assert_uint_eq(ea_config_hash(def), h0); /* stable */
  char *dump = dump_alloc(def);
  key_info *keys = calloc(MAX_KEYS, sizeof *keys);
  size_t n = dump_keys(dump, keys, MAX_KEYS);
  uint64_t *seen = calloc(n, sizeof *seen);
  for (size_t i = 0; i < n; i++) {
    ea_config *c = cfg_new();
    char full[128], val[160], err[512] = "";
    snprintf(full, sizeof full, "%s.%s", keys[i].section, keys[i].key);
    if (!other_value(&keys[i], val, sizeof val)) {
      ck_assert_str_eq(full, "distributed.strategy"); /* the only choice of one */
      free(c);
      continue;
    }
    ck_assert_msg(ea_config_set(c, full, val, err, sizeof err) == 0, "%s=%s: %s", full, val, err);
    ck_assert_int_ne(memcmp(c, def, sizeof *c), 0);
    seen[i] = ea_config_hash(c);
    ck_assert_msg(seen[i] != h0, "%s=%s does not change the hash", full, val);
    for (size_t j = 0; j < i; j++) ck_assert_uint_ne(seen[j], seen[i]);
    /* the changed value is what the dump shows for that key */
    char *d = dump_alloc(c);
    char line[400];
    snprintf(line, sizeof line, "\n  %s: %s%s%s\n", keys[i].key, keys[i].def[0] == '"' ? "\"" : "",
             val, keys[i].def[0] == '"' ? "\"" : "");
    if (!is_number_rule(&keys[i])) ck_assert_msg(strstr(d, line) != NULL, "dump lacks [%s]", line);
    free(d);
    free(c);
  }
  free(seen);
  free(keys);
  free(dump);
  free(def);
}
END_TEST

/* ---- seeded mutations ----------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

START_TEST(mutated_files_load_or_fail_cleanly) {
  uint64_t seed = (uint64_t)getpid() * 2654435761u ^ (uint64_t)time(NULL);
  const char *env = getenv("EA_SEED");
  if (env) seed = strtoull(env, NULL, 0);
  printf("test_config: mutated_files seed=%llu (EA_SEED=%llu to replay)\n",
         (unsigned long long)seed, (unsigned long long)seed);
  fflush(stdout);
  uint64_t rng = seed;
  size_t len;
  char *orig = read_text("examples/job.yaml", &len);
  char *buf = malloc(len + 64);
  static const char alphabet[] = " \t\n:#-[]{}\"'|>&*!%@`,?0123456789abcxyz\\~.";
  int loaded = 0, refused = 0;
  for (int iter = 0; iter < 400; iter++) {
    memcpy(buf, orig, len);
    size_t n = len;
    int edits = 1 + (int)(rng_next(&rng) % 4);
    for (int e = 0; e < edits; e++) {
      size_t at = rng_next(&rng) % n;
      switch (rng_next(&rng) % 4) {
        case 0:
          buf[at] = alphabet[rng_next(&rng) % (sizeof alphabet - 1)];
          break;
        case 1:
          buf[at] = (char)(rng_next(&rng) & 0xff);
          break;
        case 2:
          memmove(buf + at, buf + at + 1, n - at - 1), n--;
          break;
        case 3:
          memmove(buf + at + 1, buf + at, n - at), n++;
          buf[at] = alphabet[rng_next(&rng) % (sizeof alphabet - 1)];
          break;
      }
    }
    write_text(g_path, buf, n);
    size_t lines = 1; /* as YAML counts them: \n, \r\n and a lone \r end a line */
    for (size_t i = 0; i < n; i++)
      lines += buf[i] == '\n' || (buf[i] == '\r' && (i + 1 >= n || buf[i + 1] != '\n'));
    ea_config *c = cfg_new();
    char err[512] = "";
    int rc = ea_config_load(c, g_path, err, sizeof err);
    if (rc == 0) {
      loaded++;
      assert_roundtrip(c);
    } else {
      refused++;
      ck_assert_int_eq(rc, -EINVAL);
      size_t pl = strlen(g_path);
      ck_assert_msg(strncmp(err, g_path, pl) == 0 && err[pl] == ':', "iter %d: %s", iter, err);
      char *end;
      unsigned long line = strtoul(err + pl + 1, &end, 10);
      ck_assert_msg(line >= 1 && line <= lines && end[0] == ':' && end[1] == ' ',
                    "iter %d: bad line in: %s", iter, err);
      ck_assert_uint_gt(strlen(end), 3);
      /* several problems: every further line is also PATH:LINE: … */
      for (const char *nl = strchr(err, '\n'); nl; nl = strchr(nl + 1, '\n')) {
        ck_assert_msg(strncmp(nl + 1, g_path, pl) == 0 && nl[1 + pl] == ':', "iter %d: %s", iter,
                      err);
        unsigned long l2 = strtoul(nl + 2 + pl, &end, 10);
        ck_assert_msg(l2 >= 1 && l2 <= lines && end[0] == ':' && end[1] == ' ',
                      "iter %d: bad line in: %s", iter, err);
      }
    }
    free(c);
  }
  printf("test_config: %d mutated files loaded, %d refused\n", loaded, refused);
  ck_assert_int_gt(loaded, 0);
  ck_assert_int_gt(refused, 0);
  free(buf);
  free(orig);
}
END_TEST

static Suite *config_suite(void) {
  Suite *s = suite_create("config");
  TCase *tc = tcase_create("config");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, defaults_are_documented_and_valid);
  tcase_add_test(tc, membership_keys_are_swim_fields);
  tcase_add_test(tc, example_has_every_key_and_loads_to_defaults);
  tcase_add_test(tc, docs_reference_matches_table);
  tcase_add_test(tc, guide_job_file_loads_as_written);
  tcase_add_loop_test(tc, uri_keys_take_file_uris_and_paths, 0,
                      (int)(sizeof uris / sizeof uris[0]));
  tcase_add_test(tc, every_problem_of_a_file_at_once);
  tcase_add_test(tc, a_problem_stays_on_its_line);
  tcase_add_loop_test(tc, empty_files_give_defaults, 0,
                      (int)(sizeof empty_files / sizeof empty_files[0]));
  tcase_add_test(tc, load_overlays_only_given_keys);
  tcase_add_test(tc, old_key_name_still_works);
  tcase_add_test(tc, changed_keys_of_a_section);
  tcase_add_test(tc, booleans_accept_yaml_words);
  tcase_add_loop_test(tc, bad_file_exact_message, 0, (int)(sizeof bad_files / sizeof bad_files[0]));
  tcase_add_test(tc, error_after_good_keys_leaves_config_unchanged);
  tcase_add_test(tc, unreadable_files);
  tcase_add_test(tc, oversized_file_refused);
  tcase_add_test(tc, deep_nesting_refused_at_once);
  tcase_add_test(tc, many_anchors_refused_at_once);
  tcase_add_test(tc, set_overrides);
  tcase_add_loop_test(tc, set_errors_exact_message, 0, (int)(sizeof bad_sets / sizeof bad_sets[0]));
  tcase_add_test(tc, validate_cross_field);
  tcase_add_test(tc, validate_per_key);
  tcase_add_test(tc, dump_load_roundtrip);
  tcase_add_test(tc, dump_is_bounded_like_snprintf);
  tcase_add_test(tc, hash_changes_with_every_key);
  tcase_add_test(tc, mutated_files_load_or_fail_cleanly);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(config_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
