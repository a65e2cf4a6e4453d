/* `elastic-agent ckpt ls|show|verify`: the operator's view of a checkpoint
 * directory, built only on the public ea_ckpt API so that what an operator
 * sees is exactly what resume would see.
 *
 *   ckpt ls DIR                 one line per step directory, newest first
 *   ckpt show DIR [STEP]        one manifest, pretty (default: newest complete)
 *   ckpt verify DIR [STEP] [--size]
 *                               re-hash every shard (or only check sizes);
 *                               without STEP every complete checkpoint
 *
 * Exit codes follow grep/diff: 0 fine, 1 a checkpoint is damaged or was not
 * found, 2 usage or I/O trouble with DIR itself. */
#include "ea_ckpt.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static void human(char *out, size_t cap, uint64_t b) {
  static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)b;
  int i = 0;
  while (v >= 1024 && i < 5) {
    v /= 1024;
    i++;
  }
  if (i == 0)
    snprintf(out, cap, "%" PRIu64 " B", b);
  else
    snprintf(out, cap, "%.1f %s", v, u[i]);
}

static void iso(char *out, size_t cap, int64_t t) {
  struct tm tm;
  time_t tt = (time_t)t;
  if (!gmtime_r(&tt, &tm) || !strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm))
    snprintf(out, cap, "-");
}

static int usage(void) {
  fprintf(stderr,
          "usage: elastic-agent ckpt ls DIR\n"
          "       elastic-agent ckpt show DIR [STEP|step-S.gen-G|PATH]\n"
          "       elastic-agent ckpt verify DIR [STEP|step-S.gen-G|PATH] [--size]\n");
  return 2;
}

static int cmd_ls(const char *dir) {
  ea_ckpt_entry *e;
  size_t n;
  int rc = ea_ckpt_list(dir, &e, &n);
  if (rc < 0) {
    fprintf(stderr, "ckpt ls: %s: %s\n", dir, strerror(-rc));
    return 2;
  }
  printf("%-6s %12s %8s %6s %10s  %-20s  %-10s  %s\n", "LATEST", "STEP", "GEN", "WORLD", "SIZE",
         "CREATED", "STATE", "NAME");
  for (size_t i = 0; i < n; i++) {
    char sz[32], ts[32], world[16];
    human(sz, sizeof sz, e[i].bytes);
    iso(ts, sizeof ts, e[i].created);
    if (e[i].complete)
      snprintf(world, sizeof world, "%u", e[i].world_size);
    else
      snprintf(world, sizeof world, "-");
    const char *state = e[i].complete ? (e[i].superseded ? "superseded" : "complete")
                                      : (e[i].has_manifest ? "bad" : "partial");
    printf("%-6s %12" PRIu64 " %8" PRIu64 " %6s %10s  %-20s  %-10s  %s\n", e[i].latest ? "*" : "",
           e[i].step, e[i].generation, world, sz, ts, state, e[i].name);
    if (e[i].has_manifest && !e[i].complete) printf("       ! %s\n", e[i].error);
  }
  if (n == 0) printf("(no checkpoints in %s)\n", dir);
  free(e);
  return 0;
}

static bool digits(const char *s) {
  if (!*s) return false;
  for (; *s; s++)
    if (*s < '0' || *s > '9') return false;
  return true;
}

/* The step directory named by spec (see ea_ckpt_resolve), without verifying
 * it; spec NULL = the newest complete, non-superseded checkpoint. */
static int locate(const char *dir, const char *spec, char *path, size_t cap) {
  uint64_t s, g;
  if (spec && !digits(spec)) {
    int n = !strchr(spec, '/') && ea_ckpt_parse_dir_name(spec, &s, &g) == 0
                ? snprintf(path, cap, "%s/%s", dir, spec)
                : snprintf(path, cap, "%s", spec);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
  }
  uint64_t want = spec ? strtoull(spec, NULL, 10) : 0;
  ea_ckpt_entry *e;
  size_t n;
  int rc = ea_ckpt_list(dir, &e, &n);
  if (rc < 0) return rc;
  rc = -ENOENT;
  for (size_t i = 0; i < n; i++) {
    if (!e[i].complete || (spec && e[i].step != want) || (!spec && e[i].superseded)) continue;
    rc = snprintf(path, cap, "%s/%s", dir, e[i].name) >= (int)cap ? -ENAMETOOLONG : 0;
    break;
  }
  free(e);
  return rc;
}

static int cmd_show(const char *dir, const char *spec) {
  char path[EA_CKPT_PATH_MAX], err[1024];
  int rc = locate(dir, spec, path, sizeof path);
  if (rc < 0) {
    fprintf(stderr, "ckpt show: %s%s%s: %s\n", dir, spec ? " " : "", spec ? spec : "",
            rc == -ENOENT ? "no complete checkpoint" : strerror(-rc));
    return 1;
  }
  ea_ckpt_manifest m;
  if ((rc = ea_ckpt_manifest_load(path, &m, err, sizeof err)) < 0) {
    fprintf(stderr, "ckpt show: %s\n", err);
    return 1;
  }
  char sz[32], ts[32];
  human(sz, sizeof sz, m.total_bytes);
  iso(ts, sizeof ts, m.created);
  printf("checkpoint     %s\n", path);
  printf("step           %" PRIu64 "\n", m.step);
  printf("generation     %" PRIu64 "\n", m.generation);
  printf("world size     %u\n", m.world_size);
  printf("state          %" PRIu64 " bytes (%s)\n", m.total_bytes, sz);
  printf("created        %s\n", ts);
  printf("agent version  %s\n", m.agent_version);
  printf("config hash    %016" PRIx64 "\n", m.config_hash);
  printf("format         %u (hashes: xxh3-64)\n", m.format_version);
  printf("\ntensors (%u)\n", m.n_tensors);
  if (m.n_tensors)
    printf("  %-40s %-6s %-20s %14s %14s\n", "NAME", "DTYPE", "SHAPE", "OFFSET", "LENGTH");
  for (uint32_t i = 0; i < m.n_tensors; i++) {
    const ea_ckpt_tensor *t = &m.tensors[i];
    char shape[200] = "[]";
    size_t at = 0;
    for (uint32_t d = 0; d < t->ndim && at < sizeof shape; d++)
      at +=
          (size_t)snprintf(shape + at, sizeof shape - at, "%s%" PRIu64, d ? "x" : "", t->shape[d]);
    printf("  %-40s %-6s %-20s %14" PRIu64 " %14" PRIu64 "\n", t->name, t->dtype, shape, t->offset,
           t->length);
  }
  printf("\nshards (%u)\n", m.world_size);
  printf("  %-5s %-24s %14s %14s  %-16s  %s\n", "RANK", "FILE", "OFFSET", "LENGTH", "XXH3",
         "BLOCKS");
  for (uint32_t r = 0; r < m.world_size; r++) {
    const ea_ckpt_shard *s = &m.shards[r];
    char bs[32];
    human(bs, sizeof bs, s->block_size);
    printf("  %-5u %-24s %14" PRIu64 " %14" PRIu64 "  %016" PRIx64 "  %u × %s\n", r, s->file,
           s->offset, s->length, s->hash, s->n_blocks, bs);
  }
  ea_ckpt_manifest_close(&m);
  return 0;
}

/* Its MANIFEST is gone since the listing: retention of a running job
 * deleted it meanwhile (MANIFEST first, then the shards), not damage. */
static bool removed_meanwhile(const char *path) {
  char mp[EA_CKPT_PATH_MAX + 16];
  snprintf(mp, sizeof mp, "%s/MANIFEST", path);
  struct stat st;
  return stat(mp, &st) != 0 && errno == ENOENT;
}

/* 0 ok, 1 corrupt, 2 removed while it was verified (printed as such). */
static int verify_one(const char *path, ea_ckpt_verify_mode mode) {
  ea_ckpt_verify_report rep;
  int rc = ea_ckpt_verify(path, NULL, mode, 0, &rep);
  if (rc == 0) {
    printf("ok       %s (%s)\n", path,
           mode == EA_CKPT_VERIFY_FULL ? "all shards re-hashed" : "sizes");
    return 0;
  }
  if (removed_meanwhile(path)) {
    printf("gone     %s: removed while it was verified (retention of a running job)\n", path);
    return 2;
  }
  /* rep.msg names the shard file and the byte range (file and state) */
  if (rep.shard >= 0)
    printf("CORRUPT  shard %d: %s\n", rep.shard, rep.msg);
  else
    printf("CORRUPT  %s: %s\n", path, rep.msg[0] ? rep.msg : strerror(-rc));
  return 1;
}

static int cmd_verify(const char *dir, const char *spec, ea_ckpt_verify_mode mode) {
  char path[EA_CKPT_PATH_MAX];
  if (spec) {
    int rc = locate(dir, spec, path, sizeof path);
    if (rc < 0) {
      fprintf(stderr, "ckpt verify: %s %s: %s\n", dir, spec,
              rc == -ENOENT ? "no complete checkpoint with that step" : strerror(-rc));
      return 1;
    }
    return verify_one(path, mode) ? 1 : 0;
  }
  ea_ckpt_entry *e;
  size_t n;
  int rc = ea_ckpt_list(dir, &e, &n);
  if (rc < 0) {
    fprintf(stderr, "ckpt verify: %s: %s\n", dir, strerror(-rc));
    return 2;
  }
  int bad = 0, seen = 0;
  for (size_t i = 0; i < n; i++) {
    if (!e[i].has_manifest) continue;
    seen++;
    snprintf(path, sizeof path, "%s/%s", dir, e[i].name);
    if (!e[i].complete) {
      if (removed_meanwhile(path)) {
        printf("gone     %s: removed while it was verified (retention of a running job)\n", path);
        seen--;
        continue;
      }
      printf("CORRUPT  %s/%s: %s\n", dir, e[i].name, e[i].error);
      bad = 1;
      continue;
    }
    int v = verify_one(path, mode);
    if (v == 2) seen--;
    if (v == 1) bad = 1;
  }
  free(e);
  if (!seen) {
    fprintf(stderr, "ckpt verify: no checkpoints in %s\n", dir);
    return 1;
  }
  return bad;
}

int ea_ckpt_cli(int argc, char **argv) {
  int i = 0;
  if (argc > 0 && strcmp(argv[0], "ckpt") == 0) i = 1;
  if (argc - i < 2) return usage();
  const char *sub = argv[i], *dir = argv[i + 1];
  const char *spec = NULL;
  ea_ckpt_verify_mode mode = EA_CKPT_VERIFY_FULL;
  for (int k = i + 2; k < argc; k++) {
    if (strcmp(argv[k], "--size") == 0 && strcmp(sub, "verify") == 0)
      mode = EA_CKPT_VERIFY_SIZE;
    else if (argv[k][0] != '-' && !spec)
      spec = argv[k];
    else
      return usage();
  }
  if (strcmp(sub, "ls") == 0 && !spec) return cmd_ls(dir);
  if (strcmp(sub, "show") == 0) return cmd_show(dir, spec);
  if (strcmp(sub, "verify") == 0) return cmd_verify(dir, spec, mode);
  return usage();
}
