/* Unit tests of agent/'s glue, driven through a partial agent
 * (agent_fake.h): drain.c, ident.c (with node_id.c), job_glue.c and
 * ckpt_glue.c.  Each test names the promise of the docs it keeps;
 * until these, only the end-to-end scripts reached these files.
 */
#include "agent_fake.h"

#include "ea_ckpt.h"

#include <check.h>
#include <signal.h>

/* ==== drain (drain.c) ================================================================ */

static json_t *drain_cmd(fa *f, const char *args, int *rc) {
  json_t *out = NULL;
  *rc = ea__agent_cmd_drain(&f->a, args, &out);
  ck_assert_ptr_nonnull(out);
  return out;
}

static const char *jerr(json_t *doc) {
  const char *e = json_string_value(json_object_get(doc, "error"));
  return e ? e : "";
}

/* docs/operations.md, "Names are unique": two members past the check with
 * one name, and `drain N` is refused ("ambiguous: 2 live members are named
 * 'N'") until one of them is gone — nothing is drained meanwhile.  A member
 * that left no longer holds the name. */
START_TEST(test_drain_name_is_never_ambiguous) {
  fa f;
  fa_init(&f, "self");
  fa_start(&f, EA__MODE_BUILTIN);
  fa_peer_add(&f, "twin", "");
  size_t t2 = fa_peer_add(&f, "twin", "");
  fa_settle(&f);
  int rc;
  json_t *doc = drain_cmd(&f, "twin", &rc);
  ck_assert_int_eq(rc, -EEXIST);
  ck_assert_msg(strstr(jerr(doc), "ambiguous: 2 live members are named 'twin'"), "%s", jerr(doc));
  json_decref(doc);
  ck_assert_uint_eq(f.sent[EA_RDZV_DRAIN], 0);
  ck_assert_int_eq(f.a.phase, EA__PHASE_RUNNING);
  /* one of them leaves: the name is one member's again */
  fa_peer_leave(&f, t2);
  fa_settle(&f);
  doc = drain_cmd(&f, "twin", &rc);
  ck_assert_msg(rc == 0, "rc %d: %s", rc, jerr(doc));
  ck_assert_str_eq(json_string_value(json_object_get(doc, "draining")), "twin");
  ck_assert(json_is_false(json_object_get(doc, "self")));
  json_decref(doc);
  ck_assert_uint_eq(f.sent[EA_RDZV_DRAIN], 1);
  ck_assert_str_eq(f.drain_name, "twin");
  ck_assert_int_eq(f.a.phase, EA__PHASE_RUNNING); /* another member drains, not us */
  fa_free(&f);
}
END_TEST

/* docs/operations.md, the admin socket: `drain NAME` answers
 * {"error": "no alive member named 'NAME'"} for a name nobody holds, and a
 * line that is not one name is a usage error. */
START_TEST(test_drain_unknown_name_and_usage) {
  fa f;
  fa_init(&f, "self");
  fa_start(&f, EA__MODE_BUILTIN);
  fa_settle(&f);
  int rc;
  json_t *doc = drain_cmd(&f, "nobody", &rc);
  ck_assert_int_lt(rc, 0);
  ck_assert_str_eq(jerr(doc), "no alive member named 'nobody'");
  json_decref(doc);
  doc = drain_cmd(&f, "a b", &rc);
  ck_assert_int_eq(rc, -EINVAL);
  ck_assert_ptr_nonnull(strstr(jerr(doc), "usage: drain NAME"));
  json_decref(doc);
  doc = drain_cmd(&f, "", &rc);
  ck_assert_int_eq(rc, -EINVAL);
  json_decref(doc);
  ck_assert_uint_eq(f.sent[EA_RDZV_DRAIN], 0);
  ck_assert_int_eq(f.a.phase, EA__PHASE_RUNNING);
  fa_free(&f);
}
END_TEST

/* docs/operations.md, "Draining, signals and exit status": the drain is
 * skipped when no generation could form without this node (fewer than
 * compute.min_nodes other nodes alive).  Boundary: the same node in the
 * same generation with exactly min_nodes (1) other nodes alive waits for
 * the re-formation, with the deadline runtime.rendezvous_timeout_seconds. */
START_TEST(test_drain_self_skipped_below_min_nodes) {
  /* alone in its generation: stops at once */
  fa f;
  fa_init(&f, "self");
  fa_start(&f, EA__MODE_BUILTIN);
  fa_form(&f);
  int rc;
  json_t *doc = drain_cmd(&f, "self", &rc);
  ck_assert_int_eq(rc, 0);
  ck_assert(json_is_true(json_object_get(doc, "self")));
  json_decref(doc);
  ck_assert_int_ge(f.a.phase, EA__PHASE_STOPPING);
  ck_assert(!uv_is_active((uv_handle_t *)&f.a.drain_timer));
  fa_free(&f);

  /* one other node alive (min_nodes 1): drains, with the deadline */
  fa g;
  fa_init(&g, "self");
  g.o.cfg.runtime.rendezvous_timeout_seconds = 7;
  fa_start(&g, EA__MODE_BUILTIN);
  fa_form(&g);
  fa_peer_add(&g, "other", "");
  fa_settle(&g);
  doc = drain_cmd(&g, "self", &rc);
  ck_assert_int_eq(rc, 0);
  json_decref(doc);
  ck_assert_int_eq(g.a.phase, EA__PHASE_DRAINING);
  ck_assert(uv_is_active((uv_handle_t *)&g.a.drain_timer));
  ck_assert_uint_eq(uv_timer_get_due_in(&g.a.drain_timer), 7000);
  ea_rdzv_status st;
  ea_rdzv_status_get(g.a.rdzv, &st);
  ck_assert(st.draining); /* the core was told */
  /* asked again: "already" */
  doc = drain_cmd(&g, "self", &rc);
  ck_assert(json_is_true(json_object_get(doc, "already")));
  json_decref(doc);
  fa_free(&g);
}
END_TEST

static bool past_draining(fa *f) {
  return f->a.phase >= EA__PHASE_STOPPING;
}

/* docs/operations.md: the drain is bounded by
 * runtime.rendezvous_timeout_seconds, after which the agent leaves anyway.
 * Boundary: still draining just before the deadline, leaving after it. */
START_TEST(test_drain_deadline_leaves_anyway) {
  fa f;
  fa_init(&f, "self");
  f.o.cfg.runtime.rendezvous_timeout_seconds = 1;
  fa_start(&f, EA__MODE_BUILTIN);
  fa_form(&f);
  fa_peer_add(&f, "other", "");
  fa_settle(&f);
  ea__agent_begin_drain(&f.a, "test", false);
  ck_assert_int_eq(f.a.phase, EA__PHASE_DRAINING);
  uint64_t t0 = uv_now(&f.a.loop);
  ck_assert(!fa_run_until(&f, past_draining, 800));
  ck_assert_int_eq(f.a.phase, EA__PHASE_DRAINING);
  ck_assert(fa_run_until(&f, past_draining, 1500));
  ck_assert_uint_ge(uv_now(&f.a.loop) - t0, 1000);
  fa_free(&f);
}
END_TEST

/* docs/operations.md: SIGTERM drains the node first; a second signal skips
 * the drain (workers are killed), a third skips the leave. */
START_TEST(test_drain_signals_escalate) {
  fa f;
  fa_init(&f, "self");
  fa_start(&f, EA__MODE_BUILTIN);
  fa_form(&f);
  fa_peer_add(&f, "other", "");
  fa_settle(&f);
  ea__agent_on_signal(&f.a.sigterm, SIGTERM);
  ck_assert_int_eq(f.a.phase, EA__PHASE_DRAINING);
  ea__agent_on_signal(&f.a.sigterm, SIGTERM);
  ck_assert_int_ge(f.a.phase, EA__PHASE_STOPPING);
  ck_assert_int_lt(f.a.phase, EA__PHASE_CLOSING); /* LEFT is going out */
  ea__agent_on_signal(&f.a.sigint, SIGINT);
  ck_assert_int_eq(f.a.phase, EA__PHASE_CLOSING);
  fa_free(&f);
}
END_TEST

/* ==== identity (ident.c, node_id.c) ================================================== */

/* DESIGN.md, Membership: each node's 128-bit id is random and persisted in
 * data_dir/node-id: a restart on the same data dir keeps it, another data
 * dir gets another. */
START_TEST(test_ident_node_id_survives_restart) {
  fa f;
  fa_init(&f, "n1");
  char err[512];
  ck_assert_int_eq(ea__data_dir_prepare(f.o.data_dir, err, sizeof err), 0);
  ea_node_id a, b, c;
  bool created;
  ck_assert_int_eq(ea__node_id_load(f.o.data_dir, &a, &created, err, sizeof err), 0);
  ck_assert(created);
  ck_assert_int_eq(ea__node_id_load(f.o.data_dir, &b, &created, err, sizeof err), 0);
  ck_assert(!created);
  ck_assert_int_eq(ea_node_id_cmp(&a, &b), 0);
  char other[128];
  snprintf(other, sizeof other, "%s/other", f.tmp);
  ck_assert_int_eq(ea__data_dir_prepare(other, err, sizeof err), 0);
  ck_assert_int_eq(ea__node_id_load(other, &c, &created, err, sizeof err), 0);
  ck_assert(created);
  ck_assert_int_ne(ea_node_id_cmp(&a, &c), 0);
  fa_rm_rf(f.tmp);
}
END_TEST

static bool ident_have(fa *f) {
  return f->a.ident.have;
}

/* ident.c: the settle turn as agent.c runs it (identity filter first). */
static bool ident_settle(fa *f, size_t *nview, size_t *nall) {
  const ea_member *ms;
  size_t n = ea_swim_members(ea_transport_swim(f->a.tr), &ms);
  ea_member *view = NULL;
  size_t nv = n;
  bool open = ea__ident_settle(&f->a, ms, n, &view, &nv);
  if (open) {
    ea_rdzv_view(f->a.rdzv, ea__agent_now_ms(&f->a), view ? view : ms, nv);
    ea__agent_core_done(&f->a);
    n = ea_swim_members(ea_transport_swim(f->a.tr), &ms);
    ea__ident_after_elect(&f->a, ms, n);
  }
  free(view);
  if (nview) *nview = nv;
  if (nall) *nall = n;
  return open;
}

/* ident.c (docs/security.md's cluster identity): the first controller of a
 * cluster that has none makes one, persists it in <data-dir>/cluster-id
 * before advertising it in its gossip tags, and a restart on the same data
 * dir takes it back ("persisted").  Bound to the cluster key: under
 * another key the file is not this node's cluster any more. */
START_TEST(test_ident_cluster_id_persisted_then_advertised) {
  fa f;
  fa_init(&f, "n1");
  fa_start(&f, EA__MODE_BUILTIN);
  bool usage = false;
  char err[512];
  ck_assert_msg(ea__ident_load(&f.a, NULL, &usage, err, sizeof err) == 0, "%s", err);
  ck_assert(!f.a.ident.have);
  ck_assert_str_eq(f.a.ident.how, "none yet");
  ck_assert(ident_settle(&f, NULL, NULL)); /* no --join: no gate */
  ck_assert(f.a.ident.pending || f.a.ident.have);
  ck_assert(fa_run_until(&f, ident_have, FA_WAIT_MS));
  /* on disk, then in the tags */
  ea_ckpt_cluster c;
  ck_assert_int_eq(ea_ckpt_cluster_load(f.a.ident.path, &c, err, sizeof err), 0);
  char s[EA_CKPT_CLUSTER_STR];
  ea_ckpt_cluster_id_str(&c, s);
  ck_assert_str_eq(s, f.a.ident.str);
  const char *tags = ea_swim_self(ea_transport_swim(f.a.tr))->meta.tags;
  ck_assert_msg(strstr(tags, EA__TAG_CLUSTER), "tags: %s", tags);
  ck_assert(!ea_rdzv_tags_have(tags, EA_RDZV_TAG_STARTING));
  char keep[EA_CKPT_CLUSTER_STR];
  memcpy(keep, f.a.ident.str, sizeof keep);
  /* restart on the same data dir: the same identity, from the file */
  memset(&f.a.ident, 0, sizeof f.a.ident);
  ck_assert_int_eq(ea__ident_load(&f.a, NULL, &usage, err, sizeof err), 0);
  ck_assert(f.a.ident.have);
  ck_assert_str_eq(f.a.ident.how, "persisted");
  ck_assert_str_eq(f.a.ident.str, keep);
  /* under a cluster key the unkeyed identity is another cluster's */
  uint8_t key[EA_KEY_BYTES];
  memset(key, 7, sizeof key);
  memset(&f.a.ident, 0, sizeof f.a.ident);
  ck_assert_int_eq(ea__ident_load(&f.a, key, &usage, err, sizeof err), 0);
  ck_assert(!f.a.ident.have);
  fa_free(&f);
}
END_TEST

/* ident.c, the gate: an agent started with --join (without --bootstrap)
 * gives the rendezvous no view until it has met another member of its
 * cluster; once met, the gate stays open. */
START_TEST(test_ident_join_gate) {
  fa f;
  fa_init(&f, "n1");
  snprintf(f.o.join, sizeof f.o.join, "127.0.0.1:1");
  fa_start(&f, EA__MODE_BUILTIN);
  bool usage = false;
  char err[512];
  ck_assert_int_eq(ea__ident_load(&f.a, NULL, &usage, err, sizeof err), 0);
  ck_assert(f.a.ident.gated);
  ck_assert(!ident_settle(&f, NULL, NULL));
  ck_assert_ptr_null(ea_rdzv_election(f.a.rdzv)); /* no view, no election */
  fa_peer_add(&f, "n2", "");
  ck_assert(ident_settle(&f, NULL, NULL));
  ck_assert(!f.a.ident.gated);
  ck_assert_ptr_nonnull(ea_rdzv_election(f.a.rdzv));
  ck_assert_int_eq(f.a.exit_status, 0);
  fa_free(&f);
}
END_TEST

/* docs/operations.md, "Names are unique": an agent that joins with --join
 * finds a live member with another id holding its --name: it does not
 * take part, leaves and exits 2; the holder is untouched. */
START_TEST(test_ident_name_taken_at_the_gate) {
  fa f;
  fa_init(&f, "dup");
  snprintf(f.o.join, sizeof f.o.join, "127.0.0.1:1");
  fa_start(&f, EA__MODE_BUILTIN);
  bool usage = false;
  char err[512];
  ck_assert_int_eq(ea__ident_load(&f.a, NULL, &usage, err, sizeof err), 0);
  fa_peer_add(&f, "dup", "");
  ck_assert(!ident_settle(&f, NULL, NULL));
  ck_assert(f.a.ident.gated);
  ck_assert_int_eq(f.a.exit_status, EA__EXIT_USAGE);
  ck_assert_int_ge(f.a.phase, EA__PHASE_STOPPING);
  ck_assert_ptr_null(ea_rdzv_election(f.a.rdzv));
  fa_free(&f);
}
END_TEST

/* ident.c: a member advertising another cluster's identity is left out of
 * the view handed to the rendezvous (never elected, never planned);
 * members of our own cluster stay in it. */
START_TEST(test_ident_foreign_member_left_out) {
  fa f;
  fa_init(&f, "n1");
  fa_start(&f, EA__MODE_BUILTIN);
  bool usage = false;
  char err[512];
  ck_assert_int_eq(ea__ident_load(&f.a, NULL, &usage, err, sizeof err), 0);
  ck_assert(ident_settle(&f, NULL, NULL));
  ck_assert(fa_run_until(&f, ident_have, FA_WAIT_MS));
  char mine[80], other[80];
  snprintf(mine, sizeof mine, "%s", strstr(f.a.meta.tags, EA__TAG_CLUSTER));
  char *comma = strchr(mine, ',');
  if (comma) *comma = 0;
  snprintf(other, sizeof other, "%s%s", EA__TAG_CLUSTER, "0123456789abcdef0123456789abcdef");
  ck_assert_str_ne(mine, other);
  size_t ifo = fa_peer_add(&f, "foreign", other);
  size_t ifr = fa_peer_add(&f, "friend", mine);
  size_t nv = 0, nall = 0;
  ck_assert(ident_settle(&f, &nv, &nall));
  ck_assert_uint_eq(nall, 3);
  ck_assert_uint_eq(nv, 2);
  ck_assert(ea__ident_foreign(&f.a, fa_member(&f, &f.peers[ifo].id)));
  ck_assert(!ea__ident_foreign(&f.a, fa_member(&f, &f.peers[ifr].id)));
  ck_assert_uint_ge(f.a.ident.foreign_seen, 1);
  fa_free(&f);
}
END_TEST

/* ==== the job (job_glue.c) ======================================================== */

static void job_start(fa *f) {
  char err[512];
  ck_assert_msg(ea__agent_job_start(&f->a, err, sizeof err) == 0, "%s", err);
  f->a.exit_status = -1; /* nothing decided yet */
}

static bool job_over(fa *f) {
  return f->a.exit_status != -1;
}

/* DESIGN.md, "A job ends": success when every worker of the running
 * generation exited 0 — every agent exits 0 (it leaves).  Boundary: one
 * of two local workers done is not the end. */
START_TEST(test_job_success_when_every_worker_exited_0) {
  fa f;
  fa_init(&f, "n1");
  f.o.cfg.compute.workers_per_node = 2;
  fa_start(&f, EA__MODE_LIBRARY);
  job_start(&f);
  fa_form(&f);
  ea__agent *a = &f.a;
  a->w[0].done_gen = a->run.g64;
  ea__agent_local_done_check(a, 0);
  ea__agent_job_sync(a);
  ck_assert(!fa_run_until(&f, job_over, 2000)); /* past END_LINGER_MS: nothing to end */
  ck_assert_int_eq(a->phase, EA__PHASE_RUNNING);
  a->w[1].done_gen = a->run.g64;
  ea__agent_local_done_check(a, 0);
  ea__agent_job_sync(a);
  ck_assert(fa_run_until(&f, job_over, FA_WAIT_MS));
  ck_assert_int_eq(a->exit_status, EA__EXIT_OK);
  ck_assert_int_ge(a->phase, EA__PHASE_STOPPING); /* it leaves */
  fa_free(&f);
}
END_TEST

/* docs/operations.md, exit status 4: fewer than compute.min_nodes nodes for
 * runtime.rendezvous_timeout_seconds fails the job; the agent leaves and
 * exits 4.  Boundary: not before the timeout. */
START_TEST(test_job_min_nodes_exits_4) {
  fa f;
  fa_init(&f, "n1");
  f.o.cfg.compute.min_nodes = 2;
  f.o.cfg.runtime.rendezvous_timeout_seconds = 1;
  fa_start(&f, EA__MODE_BUILTIN);
  job_start(&f);
  fa_settle(&f);
  uint64_t t0 = uv_now(&f.a.loop);
  ck_assert(!fa_run_until(&f, job_over, 700));
  ck_assert(fa_run_until(&f, job_over, 3000));
  ck_assert_uint_ge(uv_now(&f.a.loop) - t0, 1000);
  ck_assert_int_eq(f.a.exit_status, EA__EXIT_MIN_NODES);
  ck_assert_int_ge(f.a.phase, EA__PHASE_STOPPING);
  fa_free(&f);
}
END_TEST

/* DESIGN.md, "A job ends": a failed job names the failing rank, node and
 * reason in status: a local worker's crash is recorded with its global
 * rank (the generation's rank base + its slot), this node's name, its exit
 * code and the reason it gave when exiting. */
START_TEST(test_job_worker_crash_names_rank_and_node) {
  fa f;
  fa_init(&f, "n7");
  f.o.cfg.compute.workers_per_node = 2;
  fa_start(&f, EA__MODE_LIBRARY);
  job_start(&f);
  fa_form(&f);
  ea__agent *a = &f.a;
  snprintf(a->w[1].exit_reason, sizeof a->w[1].exit_reason, "RuntimeError: boom");
  a->w[1].exit_code = 13;
  ea__agent_job_worker_crashed(a, 1, 13, 0);
  json_t *st = ea__job_status(a->job);
  json_t *fl = json_object_get(st, "failure");
  ck_assert_ptr_nonnull(fl);
  ck_assert_int_eq(json_integer_value(json_object_get(fl, "rank")), a->run.rank_base + 1);
  ck_assert_str_eq(json_string_value(json_object_get(fl, "node")), "n7");
  ck_assert_int_eq(json_integer_value(json_object_get(fl, "exit_code")), 13);
  ck_assert_str_eq(json_string_value(json_object_get(fl, "message")), "RuntimeError: boom");
  json_decref(st);
  /* job.h: the first failure of a generation is reported as its cause;
   * a later one (worker 0 killed by a signal) does not replace it */
  ea__agent_job_worker_crashed(a, 0, 0, 9);
  st = ea__job_status(a->job);
  fl = json_object_get(st, "failure");
  ck_assert_int_eq(json_integer_value(json_object_get(fl, "rank")), a->run.rank_base + 1);
  ck_assert_int_eq(json_integer_value(json_object_get(fl, "exit_code")), 13);
  json_decref(st);
  fa_free(&f);
}
END_TEST

/* ==== checkpoints (ckpt_glue.c) ===================================================== */

static bool ckpt_committed(fa *f) {
  return f->a.ck.committed > 0;
}

/* docs/checkpoints.md / DESIGN.md, Checkpoints: when all W shards of step
 * s are durable, the controller writes the MANIFEST and moves LATEST; a
 * checkpoint without a manifest does not exist.  Through the glue: reports
 * arriving on the control channel reach the elected controller's
 * committer; with one of two shards reported nothing is committed, with
 * both the checkpoint is, and the node knows it as its newest. */
START_TEST(test_ckpt_committed_only_when_every_shard_is_durable) {
  fa f;
  fa_init(&f, "n1");
  fa_start(&f, EA__MODE_BUILTIN);
  ea__agent *a = &f.a;
  a->dims = (ea_model_dims){8, 8, 32, 1};
  a->have_dims = true;
  fa_form(&f);
  ck_assert_ptr_nonnull(a->ckpt_ctl); /* the election names us */
  uint64_t total;
  ck_assert_int_eq(ea_state_layout(&a->dims, &total, NULL), 0);
  uint8_t *state = malloc(total);
  for (uint64_t i = 0; i < total; i++) state[i] = (uint8_t)(i * 7);
  uint64_t step = 10, gen = a->run.g64;
  const uint32_t W = 2;
  ck_assert_int_eq(ea_ckpt_prepare(a->ckpt_dir, step, gen, NULL, 0, NULL, 0), 0);
  uint8_t frame[2][EA__CKPT_WIRE_MAX];
  size_t flen[2];
  for (uint32_t r = 0; r < W; r++) {
    ea__ckpt_msg m;
    memset(&m, 0, sizeof m);
    m.type = EA__CKPT_SHARD_DURABLE;
    m.src = a->id;
    m.gen = gen;
    m.step = step;
    m.rank = r;
    m.world = W;
    m.total = total;
    ea_ckpt_shard_range(total, W, r, &m.offset, &m.length);
    char path[EA_CKPT_PATH_MAX];
    ck_assert_int_eq(ea_ckpt_shard_path(path, sizeof path, a->ckpt_dir, step, gen, r, W), 0);
    ea_ckpt_write_req q = {.path = path, .data = state + m.offset, .length = m.length};
    ea_ckpt_write_result res;
    ck_assert_int_eq(ea_ckpt_write_shard(&q, &res), 0);
    m.hash = res.hash;
    m.block_size = res.block_size;
    m.n_blocks = res.n_blocks;
    memcpy(m.block_hash, res.block_hash, sizeof m.block_hash);
    ck_assert_int_eq(ea__ckpt_encode(&m, frame[r], sizeof frame[r], &flen[r]), 0);
  }
  /* one shard of two */
  ck_assert(ea__agent_ckpt_frame(a, frame[0], flen[0]));
  ck_assert_uint_eq(a->ck.reports_in, 1);
  fa_run_for(&f, 200);
  ck_assert_uint_eq(a->ck.committed, 0);
  uint64_t s, g;
  ck_assert(!ea__agent_ckpt_newest(a, &s, &g));
  char latest[EA_CKPT_NAME_MAX];
  ck_assert_int_eq(ea_ckpt_read_latest(a->ckpt_dir, latest, sizeof latest), -ENOENT);
  /* both */
  ck_assert(ea__agent_ckpt_frame(a, frame[1], flen[1]));
  ck_assert(fa_run_until(&f, ckpt_committed, FA_WAIT_MS));
  ck_assert_uint_eq(a->ck.committed, 1);
  ck_assert_uint_eq(a->ck.failed, 0);
  ck_assert(ea__agent_ckpt_newest(a, &s, &g));
  ck_assert_uint_eq(s, step);
  ck_assert_uint_eq(g, gen);
  ck_assert_int_eq(ea_ckpt_read_latest(a->ckpt_dir, latest, sizeof latest), 0);
  ck_assert_str_eq(latest, a->ck.latest);
  free(state);
  fa_free(&f);
}
END_TEST

/* ckpt_glue.c / docs/checkpoints.md: only the elected controller commits;
 * a report sent to a node that is not (any more) the controller is dropped
 * and counted, and a node that leaves gives its committer up. */
START_TEST(test_ckpt_reports_only_to_the_controller) {
  fa f;
  fa_init(&f, "n1");
  fa_start(&f, EA__MODE_BUILTIN);
  ea__agent *a = &f.a;
  ck_assert_ptr_null(a->ckpt_ctl); /* no election yet */
  ea__ckpt_msg m = {.type = EA__CKPT_SHARD_FAILED,
                    .src = a->id,
                    .gen = 1,
                    .step = 5,
                    .rank = 0,
                    .world = 1,
                    .kind = EA__CKPT_FAIL_WRITE,
                    .error = ENOSPC};
  snprintf(m.message, sizeof m.message, "disk full");
  uint8_t buf[EA__CKPT_WIRE_MAX];
  size_t len;
  ck_assert_int_eq(ea__ckpt_encode(&m, buf, sizeof buf, &len), 0);
  ck_assert(ea__agent_ckpt_frame(a, buf, len));
  ck_assert_uint_eq(a->ck.reports_dropped, 1);
  ck_assert_uint_eq(a->ck.reports_in, 0);
  /* a malformed frame of the family is consumed and counted */
  buf[len - 1] ^= 0xff;
  ck_assert(ea__agent_ckpt_frame(a, buf, len - 3));
  ck_assert_uint_eq(a->ck.reports_bad, 1);
  /* elected: owns the committer; leaving: gives it up */
  fa_settle(&f);
  ck_assert_ptr_nonnull(a->ckpt_ctl);
  a->phase = EA__PHASE_LEAVING;
  ea__agent_ckpt_ctl_update(a);
  ck_assert_ptr_null(a->ckpt_ctl);
  a->phase = EA__PHASE_RUNNING;
  fa_free(&f);
}
END_TEST

/* ckpt_glue.c (docs/checkpoints.md): generations start above every
 * checkpoint already in checkpoint.dir, complete or not, so the generation
 * fence never refuses a fresh cluster's commits; a floor already higher is
 * kept. */
START_TEST(test_ckpt_generation_floor) {
  char tmp[] = "/tmp/ea-test-glue-floor-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(tmp));
  ea_rdzv_gen g7 = {.term = 7};
  uint64_t g64 = ea_rdzv_gen_u64(&g7);
  ck_assert_int_eq(ea_ckpt_prepare(tmp, 100, g64, NULL, 0, NULL, 0), 0);
  ea_rdzv_gen g = {.term = 2};
  ea__agent_ckpt_gen_floor(tmp, &g);
  ck_assert_uint_eq(g.term, 7);
  ea_rdzv_gen h = {.term = 9};
  ea__agent_ckpt_gen_floor(tmp, &h);
  ck_assert_uint_eq(h.term, 9);
  fa_rm_rf(tmp);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("glue");
  TCase *d = tcase_create("drain");
  tcase_set_timeout(d, 30);
  tcase_add_test(d, test_drain_name_is_never_ambiguous);
  tcase_add_test(d, test_drain_unknown_name_and_usage);
  tcase_add_test(d, test_drain_self_skipped_below_min_nodes);
  tcase_add_test(d, test_drain_deadline_leaves_anyway);
  tcase_add_test(d, test_drain_signals_escalate);
  suite_add_tcase(s, d);
  TCase *i = tcase_create("ident");
  tcase_set_timeout(i, 30);
  tcase_add_test(i, test_ident_node_id_survives_restart);
  tcase_add_test(i, test_ident_cluster_id_persisted_then_advertised);
  tcase_add_test(i, test_ident_join_gate);
  tcase_add_test(i, test_ident_name_taken_at_the_gate);
  tcase_add_test(i, test_ident_foreign_member_left_out);
  suite_add_tcase(s, i);
  TCase *j = tcase_create("job");
  tcase_set_timeout(j, 30);
  tcase_add_test(j, test_job_success_when_every_worker_exited_0);
  tcase_add_test(j, test_job_min_nodes_exits_4);
  tcase_add_test(j, test_job_worker_crash_names_rank_and_node);
  suite_add_tcase(s, j);
  TCase *c = tcase_create("ckpt");
  tcase_set_timeout(c, 30);
  tcase_add_test(c, test_ckpt_committed_only_when_every_shard_is_durable);
  tcase_add_test(c, test_ckpt_reports_only_to_the_controller);
  tcase_add_test(c, test_ckpt_generation_floor);
  suite_add_tcase(s, c);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
