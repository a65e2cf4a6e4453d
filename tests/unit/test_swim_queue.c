/* Check suite for the dissemination queue (membership/swim_queue.c).
 *
 * Promises, as memberlist's TransmitLimitedQueue makes them: fills take the
 * least-transmitted update first and the newest among equals; an update
 * leaves after `limit` transmissions, and the core's limit is
 * retransmit_mult · ceil(log10(N+1)); news about a member replaces
 * (invalidates) the older update about it, which then never goes out; a
 * fill never exceeds its byte budget or the wire's update cap, does not
 * repeat an update the caller already put in the packet, skips what
 * does not fit for smaller updates behind it, and gives up after 8 misfits;
 * the owner's per-member handle is kept exact (set on push, cleared when the
 * entry leaves); an ALIVE entry holds one reference on its metadata and
 * gives it back when it leaves.  Seeded (EA_SEED=… replays).
 */
#include "swim_queue.h"
#include "swim_unit.h"

#include "ea_membership.h"

#include <check.h>
#include <stdatomic.h>

#define KEYS 256
static uint32_t handle[KEYS]; /* the owner's qpos per member */
static ea_node_id ids[KEYS];
static ea_node_id self;

static uint32_t *slot(void *ctx, uint32_t key) {
  ck_assert_ptr_eq(ctx, handle);
  ck_assert_uint_lt(key, KEYS);
  return &handle[key];
}

static void setup(void) {
  seed_rng();
  for (uint32_t k = 0; k < KEYS; k++) {
    handle[k] = EA__NONE;
    ids[k] = test_id(k + 1);
  }
  self = test_id(0xffff);
}

static ea__bq *new_queue(void) {
  static ea__bq q;
  ea__bq_init(&q, slot, handle);
  return &q;
}

static int push(ea__bq *q, uint32_t key, uint8_t state, uint32_t inc, ea__meta_blob *meta) {
  return ea__bq_push(q, key, &ids[key], &self, state, inc, meta, 0);
}

/* Which member an update is about. */
static uint32_t key_of(const ea_update *u) {
  for (uint32_t k = 0; k < KEYS; k++)
    if (memcmp(&ids[k], &u->id, sizeof u->id) == 0) return k;
  ck_abort_msg("update about an unknown member");
  return EA__NONE;
}

/* Size of the DEAD update push() would make for key k at incarnation inc. */
static size_t dead_size(uint32_t k, uint32_t inc) {
  ea_update u = {.state = EA_STATE_DEAD, .incarnation = inc, .id = ids[k], .from = self};
  return ea_wire_update_size(&u);
}

/* One fill into an empty message; returns the keys, in packet order. */
static uint32_t fill(ea__bq *q, size_t left, uint32_t limit, uint32_t *keys) {
  static ea_msg msg;
  msg.nupdates = 0;
  uint32_t n = ea__bq_fill(q, &msg, left, limit);
  ck_assert_uint_eq(n, msg.nupdates);
  for (uint32_t i = 0; i < n; i++) keys[i] = key_of(&msg.updates[i]);
  return n;
}

static ea_meta meta_of(uint32_t i) {
  ea_meta m;
  memset(&m, 0, sizeof m);
  snprintf(m.name, sizeof m.name, "member-%u", i);
  m.gossip.family = 4;
  m.gossip.port = (uint16_t)(7000 + i);
  snprintf(m.tags, sizeof m.tags, "zone=%u,some=tags,to=make,it=bigger,than=a,dead=update", i);
  return m;
}

START_TEST(test_newest_first_among_equals) {
  ea__bq *q = new_queue();
  for (uint32_t k = 0; k < 3; k++) ck_assert_int_eq(push(q, k, EA_STATE_DEAD, 1, NULL), 0);
  ck_assert_uint_eq(ea__bq_len(q), 3);
  uint32_t got[EA_WIRE_MAX_UPDATES];
  size_t one = dead_size(0, 1);
  /* Room for one update per fill: 2 (newest), then the untransmitted 1 and
   * 0 before 2 goes again, then newest-first among the once-sent. */
  uint32_t want[] = {2, 1, 0, 2, 1, 0};
  for (int i = 0; i < 6; i++) {
    ck_assert_uint_eq(fill(q, one, 10, got), 1);
    ck_assert_uint_eq(got[0], want[i]);
  }
  /* With room for all, the packet is in the same order. */
  ck_assert_uint_eq(fill(q, 1400, 10, got), 3);
  ck_assert_uint_eq(got[0], 2);
  ck_assert_uint_eq(got[1], 1);
  ck_assert_uint_eq(got[2], 0);
  ea__bq_close(q);
}
END_TEST

START_TEST(test_least_sent_first) {
  ea__bq *q = new_queue();
  uint32_t got[EA_WIRE_MAX_UPDATES];
  push(q, 0, EA_STATE_DEAD, 1, NULL);
  ck_assert_uint_eq(fill(q, 1400, 10, got), 1); /* 0 sent once */
  ck_assert_uint_eq(fill(q, 1400, 10, got), 1); /* twice */
  push(q, 1, EA_STATE_DEAD, 1, NULL);
  ck_assert_uint_eq(fill(q, 1400, 10, got), 2);
  ck_assert_uint_eq(got[0], 1); /* never sent goes before twice sent */
  ck_assert_uint_eq(got[1], 0);
  /* An older entry sent fewer times beats a newer one sent more. */
  push(q, 2, EA_STATE_DEAD, 1, NULL);
  ck_assert_uint_eq(fill(q, dead_size(2, 1), 10, got), 1);
  ck_assert_uint_eq(got[0], 2); /* 2 now sent once, 1 once, 0 thrice */
  push(q, 3, EA_STATE_DEAD, 1, NULL);
  ck_assert_uint_eq(fill(q, 1400, 10, got), 4);
  uint32_t want[] = {3, 2, 1, 0};
  for (int i = 0; i < 4; i++) ck_assert_uint_eq(got[i], want[i]);
  ea__bq_close(q);
}
END_TEST

/* A refutation (ea__bq_push_first) goes ahead of everything: of fresher
 * entries never sent, and for all its transmissions, not only the first;
 * among refutations the usual order holds.  A plain push replacing it
 * takes its place back in the common order. */
START_TEST(test_refutation_first) {
  ea__bq *q = new_queue();
  uint32_t got[EA_WIRE_MAX_UPDATES];
  ck_assert_int_eq(ea__bq_push_first(q, 0, &ids[0], &ids[0], EA_STATE_ALIVE, 2, NULL, 0), 0);
  for (uint32_t k = 1; k <= 5; k++) push(q, k, EA_STATE_SUSPECT, 1, NULL);
  size_t one = dead_size(0, 2);
  for (int i = 0; i < 4; i++) { /* sent 4 times, still first over never-sent news */
    ck_assert_uint_eq(fill(q, one, 10, got), 1);
    ck_assert_uint_eq(got[0], 0);
  }
  ck_assert_uint_eq(fill(q, 1400, 10, got), 6);
  ck_assert_uint_eq(got[0], 0);
  ck_assert_uint_eq(got[1], 5); /* then newest first, as ever */
  ck_assert_int_eq(ea__bq_push_first(q, 3, &ids[3], &ids[3], EA_STATE_ALIVE, 2, NULL, 0), 0);
  ck_assert_uint_eq(fill(q, 1400, 10, got), 6);
  ck_assert_uint_eq(got[0], 3); /* sent 0 times: before refutation 0 (sent 5) */
  ck_assert_uint_eq(got[1], 0);
  ck_assert_uint_eq(ea__bq_len(q), 6);
  push(q, 0, EA_STATE_DEAD, 3, NULL); /* replaced by a plain entry: no longer first */
  push(q, 1, EA_STATE_DEAD, 3, NULL);
  ck_assert_uint_eq(fill(q, 1400, 10, got), 6);
  ck_assert_uint_eq(got[0], 3);
  ck_assert_uint_eq(got[1], 1);
  ck_assert_uint_eq(got[2], 0);
  ea__bq_close(q);
}
END_TEST

/* Number of decimal digits of n (n ≥ 1) is ceil(log10(n+1)). */
static uint32_t digits(uint32_t n) {
  uint32_t d = 0;
  do {
    d++;
    n /= 10;
  } while (n);
  return d;
}

START_TEST(test_retransmit_limit_formula) {
  /* memberlist's retransmitLimit: mult · ceil(log10(N+1)). */
  for (uint32_t mult = 1; mult <= 6; mult++)
    for (uint32_t n = 1; n <= 200000; n += (n < 2000 ? 1 : 997))
      ck_assert_uint_eq(ea__bq_limit(mult, n), mult * digits(n));
  ck_assert_uint_eq(ea__bq_limit(4, 9), 4);
  ck_assert_uint_eq(ea__bq_limit(4, 10), 8);
  ck_assert_uint_eq(ea__bq_limit(4, 64), 8);
  ck_assert_uint_eq(ea__bq_limit(4, 100), 12);
  ck_assert_uint_eq(ea__bq_limit(4, 5000), 16);
  ck_assert_uint_eq(ea__bq_limit(4, 0), 4);        /* log10(1) = 0 counts as 1 */
  ck_assert_uint_eq(ea__bq_limit(0, 100), 1);      /* always sent at least once */
  ck_assert_uint_eq(ea__bq_limit(100, 5000), 255); /* the counter's range */
}
END_TEST

START_TEST(test_entry_leaves_at_limit) {
  ea__bq *q = new_queue();
  uint32_t got[EA_WIRE_MAX_UPDATES];
  uint32_t limit = ea__bq_limit(3, 5); /* 3 */
  push(q, 7, EA_STATE_SUSPECT, 2, NULL);
  ck_assert_uint_ne(handle[7], EA__NONE);
  for (uint32_t i = 0; i < limit; i++) {
    ck_assert_uint_eq(fill(q, 1400, limit, got), 1);
    ck_assert_uint_eq(got[0], 7);
  }
  ck_assert_uint_eq(ea__bq_len(q), 0);
  ck_assert_uint_eq(handle[7], EA__NONE); /* the owner is told */
  ck_assert_uint_eq(fill(q, 1400, limit, got), 0);
  /* A skipped (too big) entry was not transmitted: it does not age. */
  push(q, 8, EA_STATE_DEAD, 1, NULL);
  for (int i = 0; i < 10; i++) ck_assert_uint_eq(fill(q, dead_size(8, 1) - 1, 1, got), 0);
  ck_assert_uint_eq(ea__bq_len(q), 1);
  ck_assert_uint_eq(fill(q, dead_size(8, 1), 1, got), 1);
  ck_assert_uint_eq(ea__bq_len(q), 0);
  ea__bq_close(q);
}
END_TEST

/* An update the caller already put in the packet is not added again, and
 * counts as a transmission; one that differs (older incarnation, or the
 * caller's copy lacks the metadata the entry has) is still added. */
START_TEST(test_fill_skips_what_the_packet_holds) {
  ea__bq *q = new_queue();
  ea_meta m = meta_of(6);
  ea__meta_blob *b = ea__meta_intern(&m);
  push(q, 4, EA_STATE_SUSPECT, 2, NULL);
  push(q, 5, EA_STATE_DEAD, 1, NULL);
  static ea_msg msg;
  msg.nupdates = 1;
  msg.updates[0] =
      (ea_update){.state = EA_STATE_SUSPECT, .incarnation = 2, .id = ids[4], .from = self};
  ck_assert_uint_eq(ea__bq_fill(q, &msg, 1400, 2), 1); /* only 5 added */
  ck_assert_uint_eq(msg.nupdates, 2);
  ck_assert_uint_eq(key_of(&msg.updates[1]), 5);
  msg.nupdates = 1; /* again: 4 reaches its limit of 2 through the caller's copies */
  ck_assert_uint_eq(ea__bq_fill(q, &msg, 1400, 2), 1);
  ck_assert_uint_eq(ea__bq_len(q), 0);
  ck_assert_uint_eq(handle[4], EA__NONE);
  /* not the same: another incarnation; an ALIVE with metadata against the
   * caller's without */
  push(q, 4, EA_STATE_SUSPECT, 3, NULL);
  push(q, 6, EA_STATE_ALIVE, 1, b);
  msg.nupdates = 2;
  msg.updates[1] =
      (ea_update){.state = EA_STATE_ALIVE, .incarnation = 1, .id = ids[6], .from = self};
  ck_assert_uint_eq(ea__bq_fill(q, &msg, 1400, 5), 2);
  ck_assert_uint_eq(msg.nupdates, 4);
  /* the caller's ALIVE with metadata covers the entry's */
  msg.nupdates = 2;
  msg.updates[1].has_meta = true;
  msg.updates[1].meta = b->m;
  ck_assert_uint_eq(ea__bq_fill(q, &msg, 1400, 5), 1);
  ck_assert_uint_eq(key_of(&msg.updates[2]), 4);
  ea__bq_close(q);
  ea__meta_release(b);
}
END_TEST

START_TEST(test_newer_update_invalidates_older) {
  ea__bq *q = new_queue();
  size_t base = ea__meta_count();
  ea_meta m = meta_of(5);
  ea__meta_blob *b = ea__meta_intern(&m);
  push(q, 5, EA_STATE_ALIVE, 1, b);
  ck_assert_uint_eq(atomic_load(&b->refs), 2); /* ours and the entry's */
  push(q, 6, EA_STATE_DEAD, 1, NULL);
  push(q, 5, EA_STATE_SUSPECT, 1, b); /* about the same member: replaces */
  ck_assert_uint_eq(ea__bq_len(q), 2);
  ck_assert_uint_eq(atomic_load(&b->refs), 1); /* the ALIVE gave its back; SUSPECT holds none */
  static ea_msg msg;
  msg.nupdates = 0;
  ck_assert_uint_eq(ea__bq_fill(q, &msg, 1400, 10), 2);
  uint32_t fives = 0;
  for (uint32_t i = 0; i < msg.nupdates; i++) {
    if (key_of(&msg.updates[i]) != 5) continue;
    fives++;
    ck_assert_uint_eq(msg.updates[i].state, EA_STATE_SUSPECT);
    ck_assert(!msg.updates[i].has_meta);
  }
  ck_assert_uint_eq(fives, 1); /* the ALIVE never goes out */
  /* A replacement starts its transmissions over: 6, sent twice of three,
   * is replaced and then goes out three more times. */
  uint32_t got[EA_WIRE_MAX_UPDATES];
  ea__bq_clear(q);
  push(q, 6, EA_STATE_DEAD, 1, NULL);
  ck_assert_uint_eq(fill(q, 1400, 3, got), 1);
  ck_assert_uint_eq(fill(q, 1400, 3, got), 1);
  push(q, 6, EA_STATE_DEAD, 2, NULL);
  for (int i = 0; i < 3; i++) ck_assert_uint_eq(fill(q, 1400, 3, got), 1);
  ck_assert_uint_eq(fill(q, 1400, 3, got), 0);
  ea__bq_close(q);
  ea__meta_release(b);
  ck_assert_uint_eq(ea__meta_count(), base);
}
END_TEST

START_TEST(test_alive_carries_meta_others_do_not) {
  ea__bq *q = new_queue();
  ea_meta m = meta_of(9);
  ea__meta_blob *b = ea__meta_intern(&m);
  push(q, 1, EA_STATE_ALIVE, 3, b);
  push(q, 2, EA_STATE_DEAD, 3, b);
  push(q, 3, EA_STATE_LEFT, 3, b);
  ck_assert_uint_eq(atomic_load(&b->refs), 2); /* only the ALIVE took one */
  static ea_msg msg;
  msg.nupdates = 0;
  ck_assert_uint_eq(ea__bq_fill(q, &msg, 1400, 1), 3); /* limit 1: all leave */
  for (uint32_t i = 0; i < 3; i++) {
    const ea_update *u = &msg.updates[i];
    ck_assert_uint_eq(u->incarnation, 3);
    ck_assert_int_eq(memcmp(&u->from, &self, sizeof self), 0);
    ck_assert(u->has_meta == (u->state == EA_STATE_ALIVE));
    if (u->has_meta) ck_assert_int_eq(memcmp(&u->meta, &b->m, sizeof u->meta), 0);
  }
  ck_assert_uint_eq(atomic_load(&b->refs), 1); /* given back on leaving */
  ea__meta_release(b);
  ea__bq_close(q);
}
END_TEST

START_TEST(test_fill_respects_budget) {
  ea__bq *q = new_queue();
  ea__meta_blob *b[40];
  for (uint32_t k = 0; k < 40; k++) {
    ea_meta m = meta_of(k);
    b[k] = ea__meta_intern(&m);
    push(q, k, (k % 3) ? EA_STATE_ALIVE : EA_STATE_DEAD, (uint32_t)rnd() & 0xffff, b[k]);
  }
  for (int round = 0; round < 20; round++) {
    size_t budget = 200 + rnd_below(1300);
    static ea_msg msg;
    msg.nupdates = 0;
    ea__bq_fill(q, &msg, budget, 1000);
    size_t used = 0;
    for (uint32_t i = 0; i < msg.nupdates; i++) used += ea_wire_update_size(&msg.updates[i]);
    ck_assert_uint_le(used, budget);
    ck_assert_uint_gt(msg.nupdates, 0);
  }
  /* Never more than the wire's update cap, however much room. */
  for (uint32_t k = 40; k < 200; k++) push(q, k, EA_STATE_DEAD, 1, NULL);
  uint32_t got[EA_WIRE_MAX_UPDATES];
  ck_assert_uint_eq(fill(q, 1 << 20, 1000, got), EA_WIRE_MAX_UPDATES);
  /* Below the smallest possible update nothing is even looked at. */
  ck_assert_uint_eq(fill(q, q->min_size - 1, 1000, got), 0);
  ea__bq_close(q);
  for (int k = 0; k < 40; k++) ea__meta_release(b[k]);
}
END_TEST

START_TEST(test_misfits_skipped_then_give_up) {
  uint32_t got[EA_WIRE_MAX_UPDATES];
  ea_meta m = meta_of(1);
  ea__meta_blob *b = ea__meta_intern(&m);
  for (uint32_t nbig = 7; nbig <= 8; nbig++) {
    setup();
    ea__bq *q = new_queue();
    push(q, 0, EA_STATE_DEAD, 1, NULL);                                    /* small, oldest */
    for (uint32_t k = 1; k <= nbig; k++) push(q, k, EA_STATE_ALIVE, 1, b); /* big, newer */
    size_t left = dead_size(0, 1);
    ck_assert_uint_lt(left, q->pool[handle[1]].size); /* the big ones cannot fit */
    uint32_t n = fill(q, left, 10, got);
    if (nbig == 7) { /* 7 misfits, then the small one fits */
      ck_assert_uint_eq(n, 1);
      ck_assert_uint_eq(got[0], 0);
    } else { /* 8 misfits: the packet is as good as full */
      ck_assert_uint_eq(n, 0);
    }
    ck_assert_uint_eq(ea__bq_len(q), nbig + 1); /* misfits stay queued, untouched */
    for (uint32_t k = 1; k <= nbig; k++) ck_assert_uint_eq(q->pool[handle[k]].transmits, 0);
    ea__bq_close(q);
  }
  ea__meta_release(b);
}
END_TEST

START_TEST(test_handles_drop_clear_rekey) {
  ea__bq *q = new_queue();
  for (uint32_t k = 0; k < 10; k++) push(q, k, EA_STATE_DEAD, 1, NULL);
  /* Each handle names the entry about its member. */
  for (uint32_t k = 0; k < 10; k++) {
    ck_assert_uint_ne(handle[k], EA__NONE);
    ck_assert_int_eq(memcmp(&q->pool[handle[k]].id, &ids[k], sizeof ids[k]), 0);
    ck_assert_uint_eq(q->pool[handle[k]].key, k);
  }
  ea__bq_drop(q, handle[4]);
  ck_assert_uint_eq(handle[4], EA__NONE);
  ck_assert_uint_eq(ea__bq_len(q), 9);
  /* The owner moves member 9 to index 4 (a swap-remove): it rekeys. */
  handle[4] = handle[9];
  handle[9] = EA__NONE;
  ids[4] = ids[9];
  ea__bq_rekey(q, handle[4], 4);
  push(q, 4, EA_STATE_LEFT, 2, NULL); /* invalidates the moved entry */
  ck_assert_uint_eq(ea__bq_len(q), 9);
  uint32_t got[EA_WIRE_MAX_UPDATES];
  ck_assert_uint_eq(fill(q, 1400, 1, got), 9); /* limit 1: all leave, handles cleared */
  for (uint32_t k = 0; k < KEYS; k++) ck_assert_uint_eq(handle[k], EA__NONE);
  for (uint32_t k = 0; k < 5; k++) push(q, k, EA_STATE_DEAD, 1, NULL);
  ea__bq_clear(q);
  ck_assert_uint_eq(ea__bq_len(q), 0);
  for (uint32_t k = 0; k < KEYS; k++) ck_assert_uint_eq(handle[k], EA__NONE);
  ea__bq_close(q);
}
END_TEST

int main(void) {
  Suite *s = suite_create("swim_queue");
  TCase *t = tcase_create("queue");
  tcase_add_checked_fixture(t, setup, NULL);
  tcase_add_test(t, test_newest_first_among_equals);
  tcase_add_test(t, test_least_sent_first);
  tcase_add_test(t, test_refutation_first);
  tcase_add_test(t, test_retransmit_limit_formula);
  tcase_add_test(t, test_entry_leaves_at_limit);
  tcase_add_test(t, test_fill_skips_what_the_packet_holds);
  tcase_add_test(t, test_newer_update_invalidates_older);
  tcase_add_test(t, test_alive_carries_meta_others_do_not);
  tcase_add_test(t, test_fill_respects_budget);
  tcase_add_test(t, test_misfits_skipped_then_give_up);
  tcase_add_test(t, test_handles_drop_clear_rekey);
  suite_add_tcase(s, t);
  return run_suite(s, "swim_queue");
}
