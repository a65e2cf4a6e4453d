/* Crash consistency of ckpt/, in the SQLite manner: fail or tear every
 * single file operation of a whole save+commit+retention sequence, one at a
 * time, and check what is left.
 *
 * The sequence saves steps 10 (generation 1), 20 (1) and 30 (2), each as 2
 * shards written in 64 KiB chunks (so every shard takes several writes),
 * commits each and runs retention with keep_last = 2.  For each fault point
 * ("open", "write", "fsync", "rename", "torn") and each N from 1 until the
 * sequence runs out of such operations, the Nth operation fails with EIO
 * (or, for "torn", writes half and the process "dies").  Then, in one pass
 * the process just goes on (errors are reported, nothing is lost), in the
 * other the machine loses power: the crash simulator (faults.c) drops,
 * truncates or garbles every write not yet fsynced and undoes a
 * random subset of the directory operations not yet fsynced.
 *
 * After each, the promises asserted:
 *   - every MANIFEST on disk parses and its shards verify in full: no
 *     manifest ever points at incomplete data;
 *   - resume picks a checkpoint at least as new as the last commit that
 *     returned success, no newer than the one being attempted, and needs no
 *     fallback to get there; with no successful commit it finds nothing or
 *     the one being committed;
 *   - LATEST, when present, names a complete checkpoint, at least as new as
 *     the last successful commit;
 *   - the next save (step 40) succeeds, resume picks it, and retention has
 *     cleaned every leftover older than it.
 * The same for faults inside retention alone, and for real processes killed
 * with SIGKILL at a write, fsync or rename (EA_CKPT_FAULT=point:N:kill).
 * A process killed inside a commit dies holding DIR/.lock: its record stays
 * in the lock file (asserted for the kills at a rename, which happen only
 * inside a commit), but the lock dies with it, so the next save gets the
 * lock at once (the lock timeout is cut to 200 ms, and nothing fails).
 * The seed (data and crash choices) is printed; EA_SEED=… replays.
 */
#include "ea_ckpt.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define W 2
#define NSTEPS 4
static const uint64_t STEP[NSTEPS] = {10, 20, 30, 40};
static const uint64_t GEN[NSTEPS] = {1, 1, 2, 2};
static uint64_t g_seed;
static char g_dir[256];
static uint8_t *g_state[NSTEPS];
static uint64_t g_total[NSTEPS];

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p);
}
static void rm_rf(const char *p) {
  nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void make_states(void) {
  uint64_t s = g_seed;
  for (int i = 0; i < NSTEPS; i++) {
    /* about 150 KiB per shard: 3 chunks of 64 KiB, an odd tail */
    g_total[i] = 300000 + (splitmix(&s) % 20000) * 2 + 1;
    g_state[i] = malloc(g_total[i]);
    for (uint64_t k = 0; k < g_total[i]; k++) g_state[i][k] = (uint8_t)splitmix(&s);
  }
}

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ea-test-ckpt-crash-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
  ea_ckpt_fault_reset();
  make_states();
}

static void teardown(void) {
  ea_ckpt_sim_end();
  ea_ckpt_fault_reset();
  rm_rf(g_dir);
  for (int i = 0; i < NSTEPS; i++) free(g_state[i]);
}

/* One checkpoint: prepare, write the shards, commit, retain.  Returns 0 or
 * the first error; *committed says whether commit returned success. */
static int save_one(const char *dir, int i, unsigned io_flags, bool *committed, FILE *progress) {
  char err[1024];
  *committed = false;
  int rc = ea_ckpt_prepare(dir, STEP[i], GEN[i], NULL, 0, err, sizeof err);
  if (rc < 0) return rc;
  /* no ck_assert here: this also runs in --seq-child, outside Check */
  ea_ckpt_manifest m;
  if ((rc = ea_ckpt_manifest_init(&m, STEP[i], GEN[i], W, g_total[i])) < 0) return rc;
  for (uint32_t r = 0; r < W; r++) {
    char p[1024];
    ea_ckpt_shard_path(p, sizeof p, dir, STEP[i], GEN[i], r, W);
    ea_ckpt_write_req q = {.path = p,
                           .data = g_state[i] + m.shards[r].offset,
                           .length = m.shards[r].length,
                           .flags = io_flags,
                           .chunk_bytes = 64u << 10,
                           .queue_depth = 2};
    ea_ckpt_write_result res;
    if ((rc = ea_ckpt_write_shard(&q, &res)) < 0 ||
        (rc = ea_ckpt_manifest_set_shard(&m, r, &res)) < 0)
      goto out;
  }
  if ((rc = ea_ckpt_commit(dir, &m, NULL, err, sizeof err)) < 0) goto out;
  *committed = true;
  if (progress) {
    fprintf(progress, "%" PRIu64 "\n", STEP[i]);
    fflush(progress);
  }
  rc = ea_ckpt_retain(dir, 2, NULL, 0, NULL, err, sizeof err);
out:
  ea_ckpt_manifest_close(&m);
  return rc;
}

/* Steps [from, to); stops at the first error.  *last_ok: the newest step
 * whose commit succeeded (0: none); *attempted: the step that failed (0:
 * none did). */
static int run_seq(const char *dir, int from, int to, unsigned io_flags, uint64_t *last_ok,
                   uint64_t *attempted, FILE *progress) {
  *attempted = 0;
  for (int i = from; i < to; i++) {
    bool committed;
    int rc = save_one(dir, i, io_flags, &committed, progress);
    if (committed) *last_ok = STEP[i];
    if (rc < 0) {
      *attempted = STEP[i];
      return rc;
    }
  }
  return 0;
}

static void check_consistent(const char *dir, uint64_t last_ok, uint64_t attempted,
                             const char *ctx) {
  ea_ckpt_entry *e = NULL;
  size_t n = 0;
  int rc = ea_ckpt_list(dir, &e, &n);
  ck_assert_msg(rc == 0 || rc == -ENOENT, "%s: list: %d", ctx, rc);
  char latest[64] = "";
  bool have_latest = ea_ckpt_read_latest(dir, latest, sizeof latest) == 0;
  bool latest_seen = false;
  for (size_t i = 0; i < n; i++) {
    if (!e[i].has_manifest) continue;
    ck_assert_msg(e[i].complete, "%s: %s has a MANIFEST that does not parse: %s", ctx, e[i].name,
                  e[i].error);
    char ck[512];
    snprintf(ck, sizeof ck, "%s/%s", dir, e[i].name);
    ea_ckpt_verify_report rep;
    rc = ea_ckpt_verify(ck, NULL, EA_CKPT_VERIFY_FULL, EA_CKPT_IO_BUFFERED, &rep);
    ck_assert_msg(rc == 0, "%s: MANIFEST of %s points at bad data: %s", ctx, e[i].name, rep.msg);
    if (have_latest && strcmp(latest, e[i].name) == 0) latest_seen = true;
  }
  ck_assert_msg(!have_latest || latest_seen, "%s: LATEST names %s, not a complete checkpoint", ctx,
                latest);
  if (last_ok) { /* a commit that returned success moved LATEST durably */
    uint64_t ls = 0, lg;
    ck_assert_msg(have_latest && ea_ckpt_parse_dir_name(latest, &ls, &lg) == 0 && ls >= last_ok,
                  "%s: LATEST is \"%s\" after step %" PRIu64 " was committed", ctx, latest,
                  last_ok);
  }
  free(e);
  ea_ckpt_resume rs;
  rc = ea_ckpt_find_resume(dir, EA_CKPT_VERIFY_FULL, &rs);
  uint64_t hi = attempted ? attempted : last_ok;
  if (last_ok) {
    ck_assert_msg(rc == 0, "%s: nothing to resume from, but step %" PRIu64 " was committed", ctx,
                  last_ok);
  }
  if (rc == 0) {
    ck_assert_msg(rs.manifest.step >= last_ok && rs.manifest.step <= hi,
                  "%s: resume picked step %" PRIu64 ", expected %" PRIu64 "..%" PRIu64, ctx,
                  rs.manifest.step, last_ok, hi);
    ck_assert_msg(rs.n_skipped == 0, "%s: resume had to skip %s: %s", ctx, rs.skipped[0].name,
                  rs.skipped[0].reason);
    ea_ckpt_resume_close(&rs);
  } else {
    ck_assert_msg(rc == -ENOENT, "%s: find_resume: %d", ctx, rc);
  }
}

/* After the fault: the next save works and cleans up behind it. */
static void check_recovers(const char *dir, const char *ctx) {
  uint64_t last_ok = 0, attempted;
  ea_ckpt_sim_begin(); /* only to skip real fsyncs: this runs hundreds of times */
  int rc = run_seq(dir, 3, 4, 0, &last_ok, &attempted, NULL);
  ea_ckpt_sim_end();
  ck_assert_msg(rc == 0, "%s: the next save failed: %d", ctx, rc);
  ea_ckpt_resume rs;
  ck_assert_int_eq(ea_ckpt_find_resume(dir, EA_CKPT_VERIFY_FULL, &rs), 0);
  ck_assert_msg(rs.manifest.step == 40, "%s: resume picked %" PRIu64 " after step 40", ctx,
                rs.manifest.step);
  ea_ckpt_resume_close(&rs);
  ea_ckpt_entry *e;
  size_t n;
  ck_assert_int_eq(ea_ckpt_list(dir, &e, &n), 0);
  int complete = 0;
  for (size_t i = 0; i < n; i++) {
    ck_assert_msg(e[i].complete, "%s: leftover %s survived retention", ctx, e[i].name);
    complete++;
  }
  ck_assert_msg(complete >= 1 && complete <= 2, "%s: %d complete checkpoints kept (keep_last 2)",
                ctx, complete);
  free(e);
}

static const char *const KINDS[] = {"open", "write", "fsync", "rename", "torn"};

/* _i: kind = _i / 2; _i % 2 == 1: power loss after the fault. */
START_TEST(test_fault_every_point) {
  const char *kind = KINDS[_i / 2];
  bool power_loss = _i % 2 == 1;
  int fired_total = 0;
  for (uint64_t nth = 1;; nth++) {
    char dir[512], ctx[200];
    snprintf(dir, sizeof dir, "%s/%s-%d-%" PRIu64, g_dir, kind, (int)power_loss, nth);
    snprintf(ctx, sizeof ctx, "%s fault #%" PRIu64 "%s (EA_SEED=%" PRIu64 ")", kind, nth,
             power_loss ? " + power loss" : "", g_seed);
    /* odd N: the buffered path, even N: O_DIRECT */
    unsigned io = nth % 2 ? EA_CKPT_IO_BUFFERED : 0;
    ea_ckpt_fault_reset();
    ea_ckpt_sim_begin();
    ck_assert_int_eq(ea_ckpt_fault_arm(kind, nth, EIO), 0);
    uint64_t last_ok = 0, attempted = 0;
    int rc = run_seq(dir, 0, 3, io, &last_ok, &attempted, NULL);
    bool fired = ea_ckpt_fault_fired();
    if (power_loss)
      ck_assert_int_eq(ea_ckpt_sim_crash(g_seed ^ (nth * 0x9e3779b97f4a7c15ull) ^ (uint64_t)_i), 0);
    else
      ea_ckpt_sim_end();
    ea_ckpt_fault_reset();
    if (!fired) {
      /* past the last operation of this kind: the sequence completed */
      ck_assert_msg(rc == 0 && last_ok == 30, "%s: no fault fired but rc=%d", ctx, rc);
      rm_rf(dir);
      break;
    }
    fired_total++;
    ck_assert_msg(rc < 0, "%s: the fault fired but the sequence reported success", ctx);
    check_consistent(dir, last_ok, attempted, ctx);
    check_recovers(dir, ctx);
    rm_rf(dir);
  }
  /* each kind occurs many times in a sequence; make sure the loop ran */
  ck_assert_msg(fired_total >= 6, "%s: only %d faults fired", kind, fired_total);
  printf("%s%s: %d fault points exercised\n", kind, power_loss ? " + power loss" : "", fired_total);
}
END_TEST

START_TEST(test_fault_in_retention) {
  const char *kinds[] = {"open", "fsync"};
  for (int k = 0; k < 2; k++) {
    for (uint64_t nth = 1;; nth++) {
      char dir[512], ctx[200], err[1024];
      snprintf(dir, sizeof dir, "%s/ret-%s-%" PRIu64, g_dir, kinds[k], nth);
      snprintf(ctx, sizeof ctx, "retention %s fault #%" PRIu64 " (EA_SEED=%" PRIu64 ")", kinds[k],
               nth, g_seed);
      ea_ckpt_fault_reset();
      /* four complete checkpoints (no retention yet) and two leftovers */
      for (int i = 0; i < 3; i++) {
        bool c;
        ck_assert_int_eq(ea_ckpt_prepare(dir, STEP[i], GEN[i], NULL, 0, err, sizeof err), 0);
        ea_ckpt_manifest m;
        ea_ckpt_manifest_init(&m, STEP[i], GEN[i], 1, g_total[i]);
        char p[1024];
        ea_ckpt_shard_path(p, sizeof p, dir, STEP[i], GEN[i], 0, 1);
        ea_ckpt_write_req q = {.path = p, .data = g_state[i], .length = g_total[i]};
        ea_ckpt_write_result res;
        ck_assert_int_eq(ea_ckpt_write_shard(&q, &res), 0);
        ea_ckpt_manifest_set_shard(&m, 0, &res);
        ck_assert_int_eq(ea_ckpt_commit(dir, &m, &c, err, sizeof err), 0);
        ea_ckpt_manifest_close(&m);
      }
      ck_assert_int_eq(ea_ckpt_prepare(dir, 15, 1, NULL, 0, err, sizeof err), 0);
      ck_assert_int_eq(ea_ckpt_prepare(dir, 25, 1, NULL, 0, err, sizeof err), 0);
      ea_ckpt_sim_begin();
      ck_assert_int_eq(ea_ckpt_fault_arm(kinds[k], nth, EIO), 0);
      int rc = ea_ckpt_retain(dir, 1, NULL, 0, NULL, err, sizeof err);
      bool fired = ea_ckpt_fault_fired();
      ck_assert_int_eq(ea_ckpt_sim_crash(g_seed + nth), 0);
      ea_ckpt_fault_reset();
      if (!fired) {
        ck_assert_int_eq(rc, 0);
        rm_rf(dir);
        break;
      }
      ck_assert_msg(rc < 0, "%s: fault fired, retention said ok", ctx);
      check_consistent(dir, 30, 0, ctx);
      check_recovers(dir, ctx);
      rm_rf(dir);
    }
  }
}
END_TEST

/* ---- real processes, really killed -------------------------------------- */

/* `test_ckpt_crash --seq-child DIR PROGRESS`: runs the sequence (the fault
 * comes from EA_CKPT_FAULT), appending each committed step to PROGRESS. */
static int seq_child(char **argv) {
  make_states();
  FILE *f = fopen(argv[3], "w");
  if (!f) return 2;
  uint64_t last_ok = 0, attempted;
  int rc = run_seq(argv[2], 0, 3, 0, &last_ok, &attempted, f);
  fclose(f);
  return rc == 0 ? 0 : 1;
}

START_TEST(test_sigkill) {
  /* a lock left behind by a killed holder would fail the next save within
   * this bound instead of making it wait */
  ea_ckpt_set_lock_timeout_ms(200);
  int died_holding = 0;
  const char *specs[] = {"torn:1:kill",   "torn:5:kill",   "torn:11:kill",  "write:8:kill",
                         "write:16:kill", "fsync:4:kill",  "fsync:9:kill",  "fsync:15:kill",
                         "rename:2:kill", "rename:3:kill", "rename:5:kill", "open:12:kill"};
  for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
    char dir[512], prog[600], ctx[200];
    snprintf(dir, sizeof dir, "%s/kill-%zu", g_dir, k);
    snprintf(prog, sizeof prog, "%s/kill-%zu.progress", g_dir, k);
    snprintf(ctx, sizeof ctx, "EA_CKPT_FAULT=%s (EA_SEED=%" PRIu64 ")", specs[k], g_seed);
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, g_seed);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
      setenv("EA_CKPT_FAULT", specs[k], 1);
      setenv("EA_SEED", seed, 1);
      execl("/proc/self/exe", "test_ckpt_crash", "--seq-child", dir, prog, (char *)NULL);
      _exit(127);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
                  "%s: child was not killed (status %d)", ctx, st);
    uint64_t last_ok = 0, v;
    FILE *f = fopen(prog, "r");
    ck_assert_ptr_nonnull(f);
    while (fscanf(f, "%" SCNu64, &v) == 1) last_ok = v;
    fclose(f);
    uint64_t attempted = last_ok == 0 ? 10 : last_ok == 10 ? 20 : 30;
    if (strncmp(specs[k], "rename:", 7) == 0) {
      char lp[600], rec[128] = "", want[64];
      snprintf(lp, sizeof lp, "%s/.lock", dir);
      f = fopen(lp, "r");
      ck_assert_ptr_nonnull(f);
      if (!fgets(rec, sizeof rec, f)) rec[0] = 0;
      fclose(f);
      snprintf(want, sizeof want, "pid %d host ", (int)pid);
      ck_assert_msg(strncmp(rec, want, strlen(want)) == 0,
                    "%s: killed inside a commit, but the lock file says \"%s\"", ctx, rec);
      died_holding++;
    }
    check_consistent(dir, last_ok, attempted, ctx);
    check_recovers(dir, ctx);
  }
  ck_assert_int_eq(died_holding, 3);
  ea_ckpt_set_lock_timeout_ms(0);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("ckpt_crash");
  TCase *tc = tcase_create("crash");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_fault_every_point, 0, 10);
  tcase_add_test(tc, test_fault_in_retention);
  tcase_add_test(tc, test_sigkill);
  suite_add_tcase(s, tc);
  return s;
}

int main(int argc, char **argv) {
  const char *e = getenv("EA_SEED");
  g_seed = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
  if (argc == 4 && strcmp(argv[1], "--seq-child") == 0) return seq_child(argv);
  printf("test_ckpt_crash: seed %" PRIu64 " (EA_SEED=%" PRIu64 " replays)\n", g_seed, g_seed);
  fflush(stdout);
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
