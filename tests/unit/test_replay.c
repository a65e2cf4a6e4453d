/* Check suite for the replay window (membership/antireplay.c) and the
 * replay-proof seal around it (membership/seal.c: ea_wire_seal_rp).
 *
 * Promises: every (sender, epoch, counter) is accepted at most once; in
 * order and reordered within EA_AR_WINDOW are accepted; a duplicate, a
 * counter EA_AR_WINDOW or more below the highest, and anything of an epoch
 * older than the sender's newest are refused; a newer epoch starts afresh;
 * a sender met for the first time counts everything below its first
 * counter as seen; the table never holds more than cap senders and forgets
 * the one accepted longest ago.  The seal carries the header authenticated
 * (a flipped bit anywhere fails to open), refuses the old 0xEB layout by
 * name, and a sealed message replayed byte for byte is caught by the window.
 * A random model check compares the window with a set of everything
 * accepted.  Seeded (EA_SEED=… replays).
 */
#include "ea_antireplay.h"
#include "swim_unit.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static ea_ar_table T;

static void setup(void) {
  seed_rng();
  ck_assert_int_eq(ea_ar_init(&T, 4), 0);
}

static void teardown(void) {
  ea_ar_free(&T);
}

static ea_node_id idn(uint8_t n) {
  ea_node_id id;
  memset(id.b, n, sizeof id.b);
  return id;
}

START_TEST(test_in_order) {
  ea_node_id a = idn(1);
  for (uint64_t c = 0; c < 5000; c++) ck_assert_int_eq(ea_ar_check(&T, &a, 7, c), EA_AR_OK);
  ck_assert_uint_eq(ea_ar_count(&T), 1);
}
END_TEST

START_TEST(test_out_of_order_within_window) {
  ea_node_id a = idn(1);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 100), EA_AR_OK);
  /* a new epoch knows everything of itself: reordering inside it is fine */
  ck_assert_int_eq(ea_ar_check(&T, &a, 8, 50), EA_AR_OK);
  ck_assert_int_eq(ea_ar_check(&T, &a, 8, 60), EA_AR_OK);
  ck_assert_int_eq(ea_ar_check(&T, &a, 8, 55), EA_AR_OK);
  ck_assert_int_eq(ea_ar_check(&T, &a, 8, 0), EA_AR_OK);
  ck_assert_int_eq(ea_ar_check(&T, &a, 8, 60 + EA_AR_WINDOW - 1), EA_AR_OK);
  /* 61 is now exactly EA_AR_WINDOW - 1 below the top: still inside */
  ck_assert_int_eq(ea_ar_check(&T, &a, 8, 61), EA_AR_OK);
  ck_assert_int_eq(ea_ar_check(&T, &a, 8, 60), EA_AR_DUP); /* the window's last bit */
  ck_assert_int_eq(ea_ar_check(&T, &a, 8, 59), EA_AR_OLD); /* slid out */
  ck_assert_int_eq(ea_ar_check(&T, &a, 8, 55), EA_AR_OLD);
}
END_TEST

START_TEST(test_duplicate) {
  ea_node_id a = idn(1);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 10), EA_AR_OK);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 10), EA_AR_DUP);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 12), EA_AR_OK);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 11), EA_AR_OK);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 11), EA_AR_DUP);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 12), EA_AR_DUP);
  /* a jump forward clears the bits it skips, and only those */
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 12 + 3 * EA_AR_WINDOW / 2), EA_AR_OK);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 12 + EA_AR_WINDOW), EA_AR_OK);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 12 + EA_AR_WINDOW), EA_AR_DUP);
}
END_TEST

START_TEST(test_too_old) {
  ea_node_id a = idn(1);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 0), EA_AR_OK);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 10000), EA_AR_OK);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 10000 - EA_AR_WINDOW), EA_AR_OLD);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 1), EA_AR_OLD);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 10000 - EA_AR_WINDOW + 1), EA_AR_OK);
}
END_TEST

START_TEST(test_first_contact_counts_below_as_seen) {
  /* A receiver that restarted does not know what it accepted before: a
   * counter below the first one it sees from a sender is refused. */
  ea_node_id a = idn(1);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 500), EA_AR_OK);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 499), EA_AR_OLD);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 0), EA_AR_OLD);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 501), EA_AR_OK);
}
END_TEST

START_TEST(test_epoch_bump) {
  ea_node_id a = idn(1);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 900), EA_AR_OK);
  /* the sender restarted: its counter starts over in a larger epoch */
  ck_assert_int_eq(ea_ar_check(&T, &a, 8, 0), EA_AR_OK);
  ck_assert_int_eq(ea_ar_check(&T, &a, 8, 1), EA_AR_OK);
  /* everything of the old run is now a replay, whatever its counter */
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 901), EA_AR_EPOCH);
  ck_assert_int_eq(ea_ar_check(&T, &a, 7, 100000), EA_AR_EPOCH);
  ck_assert_int_eq(ea_ar_check(&T, &a, 8, 0), EA_AR_DUP);
  ck_assert_str_eq(ea_ar_verdict_str(EA_AR_EPOCH),
                   "from an older epoch of its sender (before it restarted)");
}
END_TEST

START_TEST(test_sender_eviction) {
  /* cap 4: the fifth sender evicts the one accepted longest ago */
  ea_node_id s[6];
  for (int i = 0; i < 6; i++) s[i] = idn((uint8_t)(10 + i));
  for (int i = 0; i < 4; i++) ck_assert_int_eq(ea_ar_check(&T, &s[i], 1, 100), EA_AR_OK);
  ck_assert_int_eq(ea_ar_check(&T, &s[0], 1, 101), EA_AR_OK); /* s[0] is now the newest */
  ck_assert_int_eq(ea_ar_check(&T, &s[4], 1, 100), EA_AR_OK); /* evicts s[1] */
  ck_assert_uint_eq(ea_ar_count(&T), 4);
  ck_assert_uint_eq(T.evictions, 1);
  ck_assert_int_eq(ea_ar_check(&T, &s[0], 1, 101), EA_AR_DUP); /* kept */
  ck_assert_int_eq(ea_ar_check(&T, &s[2], 1, 100), EA_AR_DUP); /* kept */
  /* s[1] was forgotten: met again, it is a first contact at what it sends */
  ck_assert_int_eq(ea_ar_check(&T, &s[1], 1, 200), EA_AR_OK);
  ck_assert_uint_eq(T.evictions, 2); /* s[3], the oldest now, went */
  ck_assert_int_eq(ea_ar_check(&T, &s[1], 1, 150), EA_AR_OLD);
  /* a flood of new senders never grows the table */
  for (int i = 0; i < 1000; i++) {
    ea_node_id x = test_id((uint32_t)i + 1000);
    ck_assert_int_eq(ea_ar_check(&T, &x, 1, (uint64_t)i), EA_AR_OK);
    ck_assert_uint_le(ea_ar_count(&T), 4);
  }
}
END_TEST

/* A random model: a set of accepted (sender, counter) per epoch, with the
 * window's rules applied; the table must agree on every verdict. */
#define MS 3
START_TEST(test_model) {
  ea_ar_table t;
  ck_assert_int_eq(ea_ar_init(&t, MS), 0);
  ea_node_id ids[MS];
  uint64_t epoch[MS] = {0}, top[MS] = {0}, floor_[MS] = {0};
  bool known[MS] = {false};
  static uint8_t seen[MS][20000];
  memset(seen, 0, sizeof seen);
  for (int i = 0; i < MS; i++) ids[i] = test_id((uint32_t)i);
  for (int step = 0; step < 200000; step++) {
    int i = (int)(rnd() % MS);
    uint64_t e = epoch[i] + (rnd() % 500 == 0 ? 1 : 0);
    if (rnd() % 700 == 0 && epoch[i] > 0) e = epoch[i] - 1;
    uint64_t c = rnd() % 19000;
    if (known[i] && e == epoch[i] && rnd() % 2) /* mostly near the top */
      c = top[i] + 5 > 2600 ? top[i] + 5 - rnd() % 2600 : rnd() % (top[i] + 6);
    if (c >= 19000) c = 18999;
    ea_ar_verdict want;
    if (!known[i]) {
      want = EA_AR_OK;
    } else if (e < epoch[i]) {
      want = EA_AR_EPOCH;
    } else if (e > epoch[i]) {
      want = EA_AR_OK;
    } else if (c > top[i]) {
      want = EA_AR_OK;
    } else if (c < floor_[i] || top[i] - c >= EA_AR_WINDOW) {
      want = EA_AR_OLD;
    } else {
      want = seen[i][c] ? EA_AR_DUP : EA_AR_OK;
    }
    ea_ar_verdict got = ea_ar_check(&t, &ids[i], e, c);
    ck_assert_msg(got == want, "step %d sender %d epoch %llu counter %llu: got %d want %d", step, i,
                  (unsigned long long)e, (unsigned long long)c, got, want);
    if (got != EA_AR_OK) continue;
    if (!known[i] || e > epoch[i]) {
      memset(seen[i], 0, sizeof seen[i]);
      floor_[i] = known[i] ? 0 : c;
      known[i] = true;
      epoch[i] = e;
      top[i] = c;
    }
    if (c > top[i]) top[i] = c;
    seen[i][c] = 1;
    if (step % 20000 == 19999) { /* a counter space that restarts now and then */
      epoch[i]++;
      memset(seen[i], 0, sizeof seen[i]);
      ck_assert_int_eq(ea_ar_check(&t, &ids[i], epoch[i], 0), EA_AR_OK);
      floor_[i] = 0;
      top[i] = 0;
      seen[i][0] = 1;
      known[i] = true;
    }
  }
  ea_ar_free(&t);
}
END_TEST

/* ---- the seal ---------------------------------------------------------- */

static const uint8_t KEY[EA_KEY_BYTES] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                          11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
                                          21, 22, 23, 24, 25, 26, 27, 28, 29, 30};

START_TEST(test_seal_roundtrip_and_replay) {
  ea_wire_sender s = {.id = idn(0x42), .epoch = 1234567, .next = 5};
  uint8_t pt[100], ct[200], out[200];
  pt[0] = EA_WIRE_MAGIC_PLAIN;
  for (size_t i = 1; i < sizeof pt; i++) pt[i] = (uint8_t)rnd();
  size_t clen = 0, olen = 0;
  ck_assert_int_eq(ea_wire_seal_rp(KEY, &s, pt, sizeof pt, ct, sizeof pt + 71, &clen, NULL),
                   -EMSGSIZE);
  ea_wire_rp used;
  ck_assert_int_eq(ea_wire_seal_rp(KEY, &s, pt, sizeof pt, ct, sizeof pt + 72, &clen, &used), 0);
  ck_assert_uint_eq(clen, sizeof pt + EA_WIRE_SEAL_RP_OVERHEAD - 1);
  ck_assert_uint_eq(ct[0], EA_WIRE_MAGIC_SEALED_RP);
  ck_assert_uint_eq(used.counter, 5);
  ck_assert_uint_eq(s.next, 6);
  ea_wire_rp rp;
  ck_assert_int_eq(ea_wire_open_rp(KEY, ct, clen, out, sizeof out, &olen, &rp), 0);
  ck_assert_uint_eq(olen, sizeof pt);
  ck_assert_mem_eq(out, pt, sizeof pt);
  ck_assert_mem_eq(rp.sender.b, s.id.b, 16);
  ck_assert_uint_eq(rp.epoch, 1234567);
  ck_assert_uint_eq(rp.counter, 5);
  /* every bit is authenticated, the header's and the magic's included */
  for (size_t i = 0; i < clen; i++) {
    ct[i] ^= 0x10;
    ck_assert_int_ne(ea_wire_open_rp(KEY, ct, clen, out, sizeof out, &olen, &rp), 0);
    ct[i] ^= 0x10;
  }
  /* the window accepts it once: the same bytes again are a replay */
  ck_assert_int_eq(ea_wire_open_rp(KEY, ct, clen, out, sizeof out, &olen, &rp), 0);
  ck_assert_int_eq(ea_ar_check(&T, &rp.sender, rp.epoch, rp.counter), EA_AR_OK);
  ck_assert_int_eq(ea_wire_open_rp(KEY, ct, clen, out, sizeof out, &olen, &rp), 0);
  ck_assert_int_eq(ea_ar_check(&T, &rp.sender, rp.epoch, rp.counter), EA_AR_DUP);
  /* the next one sealed is new */
  ck_assert_int_eq(ea_wire_seal_rp(KEY, &s, pt, sizeof pt, ct, sizeof ct, &clen, NULL), 0);
  ck_assert_int_eq(ea_wire_open_rp(KEY, ct, clen, out, sizeof out, &olen, &rp), 0);
  ck_assert_int_eq(ea_ar_check(&T, &rp.sender, rp.epoch, rp.counter), EA_AR_OK);
}
END_TEST

START_TEST(test_seal_refuses_old_layout) {
  uint8_t pt[40] = {EA_WIRE_MAGIC_PLAIN, 1, 2, 3}, ct[200], out[200];
  size_t clen = 0, olen = 0;
  ea_wire_rp rp;
  ck_assert_int_eq(ea_wire_seal(KEY, pt, sizeof pt, ct, sizeof ct, &clen), 0);
  ck_assert_uint_eq(ct[0], EA_WIRE_MAGIC_SEALED);
  ck_assert_int_eq(ea_wire_open_rp(KEY, ct, clen, out, sizeof out, &olen, &rp), -EPROTO);
  ck_assert_int_eq(ea_wire_open_rp(KEY, pt, sizeof pt, out, sizeof out, &olen, &rp), -EBADMSG);
  ea_wire_sender s = {.id = idn(1), .epoch = 1};
  ck_assert_int_eq(ea_wire_seal_rp(KEY, &s, pt, sizeof pt, ct, sizeof ct, &clen, NULL), 0);
  for (size_t l = 0; l < clen; l++)
    ck_assert_int_eq(ea_wire_open_rp(KEY, ct, l, out, sizeof out, &olen, &rp), -EBADMSG);
  ck_assert_int_eq(ea_wire_open_rp(KEY, ct, clen, out, clen - 41, &olen, &rp), -EBADMSG);
  ck_assert_int_eq(ea_wire_open_rp(KEY, ct, clen, out, clen - 40, &olen, &rp), 0);
  uint8_t other[EA_KEY_BYTES] = {9};
  ck_assert_int_eq(ea_wire_open_rp(other, ct, clen, out, sizeof out, &olen, &rp), -EBADMSG);
  /* the header codec alone */
  uint8_t h[EA_WIRE_RP_BYTES];
  ea_wire_rp x = {.sender = idn(7), .epoch = 0x0102030405060708ULL, .counter = UINT64_MAX}, y;
  ea_wire_rp_encode(&x, h);
  ck_assert_uint_eq(h[16], 1);
  ck_assert_uint_eq(h[23], 8);
  ea_wire_rp_decode(h, &y);
  ck_assert_mem_eq(&x.sender, &y.sender, 16);
  ck_assert_uint_eq(y.epoch, x.epoch);
  ck_assert_uint_eq(y.counter, x.counter);
}
END_TEST

int main(void) {
  Suite *s = suite_create("replay");
  TCase *t = tcase_create("window");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, test_in_order);
  tcase_add_test(t, test_out_of_order_within_window);
  tcase_add_test(t, test_duplicate);
  tcase_add_test(t, test_too_old);
  tcase_add_test(t, test_first_contact_counts_below_as_seen);
  tcase_add_test(t, test_epoch_bump);
  tcase_add_test(t, test_sender_eviction);
  tcase_add_test(t, test_model);
  tcase_add_test(t, test_seal_roundtrip_and_replay);
  tcase_add_test(t, test_seal_refuses_old_layout);
  suite_add_tcase(s, t);
  return run_suite(s, "replay");
}
