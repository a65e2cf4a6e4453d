/* Check suite for controller election (membership/election.c).
 *
 * ea_elect is a pure function of a membership view, so each case builds a
 * small view by hand and asserts the promise: the lowest id among alive or
 * suspect members whose role is not "observer" wins; dead and left members
 * never do; the reason string says why (and names the counts); the quorum is
 * a majority of the last generation's members that did not leave, counted
 * alive or suspect in this view; `quorum: none` always has quorum.  The ids
 * are shuffled per run (seeded; EA_SEED=… replays) so that no case depends
 * on array order.
 */
#include "ea_membership.h"

#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t g_seed, g_rng;

static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Member i has id with first byte i+1 (so order by i is order by id). */
static ea_member mk(int i, uint8_t state, const char *role) {
  ea_member m;
  memset(&m, 0, sizeof m);
  m.id.b[0] = (uint8_t)(i + 1);
  m.id.b[15] = (uint8_t)rnd(); /* noise below the deciding byte */
  m.state = state;
  snprintf(m.meta.role, sizeof m.meta.role, "%s", role);
  snprintf(m.meta.name, sizeof m.meta.name, "n%d", i);
  return m;
}

static void shuffle(ea_member *v, size_t n) {
  for (size_t i = n; i > 1; i--) {
    size_t j = rnd() % i;
    ea_member t = v[i - 1];
    v[i - 1] = v[j];
    v[j] = t;
  }
}

static const ea_member *by_name(const ea_member *v, size_t n, int i) {
  char name[16];
  snprintf(name, sizeof name, "n%d", i);
  for (size_t k = 0; k < n; k++)
    if (strcmp(v[k].meta.name, name) == 0) return &v[k];
  return NULL;
}

static void setup(void) {
  g_rng = g_seed;
}

START_TEST(test_lowest_alive_id_wins) {
  ea_member v[5];
  for (int i = 0; i < 5; i++) v[i] = mk(i, EA_STATE_ALIVE, "worker");
  shuffle(v, 5);
  ea_election e;
  ea_elect(v, 5, NULL, &e);
  ck_assert(e.have);
  ck_assert(e.has_quorum);
  ck_assert_uint_eq(e.eligible, 5);
  ck_assert_int_eq(ea_node_id_cmp(&e.controller, &by_name(v, 5, 0)->id), 0);
  ck_assert_str_eq(e.reason, "lowest id among 5 eligible alive members");
}
END_TEST

START_TEST(test_observers_never_elected) {
  ea_member v[4] = {mk(0, EA_STATE_ALIVE, "observer"), mk(1, EA_STATE_ALIVE, "observer"),
                    mk(2, EA_STATE_ALIVE, "worker"), mk(3, EA_STATE_ALIVE, "")};
  shuffle(v, 4);
  ea_election e;
  ea_elect(v, 4, NULL, &e);
  ck_assert(e.have);
  ck_assert_uint_eq(e.eligible, 2); /* an empty role is eligible: only "observer" is not */
  ck_assert_int_eq(ea_node_id_cmp(&e.controller, &by_name(v, 4, 2)->id), 0);
  ck_assert_str_eq(e.reason, "lowest id among 2 eligible alive members");
}
END_TEST

START_TEST(test_no_eligible_member) {
  ea_member v[3] = {mk(0, EA_STATE_ALIVE, "observer"), mk(1, EA_STATE_SUSPECT, "observer"),
                    mk(2, EA_STATE_DEAD, "worker")};
  shuffle(v, 3);
  ea_election e;
  ea_elect(v, 3, NULL, &e);
  ck_assert(!e.have);
  ck_assert_uint_eq(e.eligible, 0);
  ck_assert_str_eq(e.reason, "no eligible member alive: 2 observers");
  ea_elect(v, 0, NULL, &e);
  ck_assert(!e.have);
  ck_assert_str_eq(e.reason, "no eligible member alive: 0 observers");
}
END_TEST

/* Suspect is not yet dead: it keeps (or wins) the controllership, so that
 * packet loss does not churn controllers.  Dead and left never win. */
START_TEST(test_suspect_counts_dead_and_left_do_not) {
  ea_member v[4] = {mk(0, EA_STATE_DEAD, "worker"), mk(1, EA_STATE_LEFT, "worker"),
                    mk(2, EA_STATE_SUSPECT, "worker"), mk(3, EA_STATE_ALIVE, "worker")};
  shuffle(v, 4);
  ea_election e;
  ea_elect(v, 4, NULL, &e);
  ck_assert(e.have);
  ck_assert_uint_eq(e.eligible, 2);
  ck_assert_int_eq(ea_node_id_cmp(&e.controller, &by_name(v, 4, 2)->id), 0);
  ck_assert_str_eq(e.reason, "lowest id among 2 eligible alive members");
  ea_member one = mk(7, EA_STATE_ALIVE, "worker");
  ea_elect(&one, 1, NULL, &e);
  ck_assert_str_eq(e.reason, "lowest id among 1 eligible alive member");
}
END_TEST

/* Quorum: a majority of the generation's members that did not leave. */
START_TEST(test_quorum_majority) {
  ea_member v[5];
  for (int i = 0; i < 5; i++) v[i] = mk(i, EA_STATE_ALIVE, "worker");
  ea_node_id gen[5];
  for (int i = 0; i < 5; i++) gen[i] = v[i].id;
  ea_election_gen g = {gen, 5, false};
  ea_election e;

  v[3].state = EA_STATE_DEAD;
  v[4].state = EA_STATE_DEAD;
  shuffle(v, 5);
  ea_elect(v, 5, &g, &e);
  ck_assert(e.have);
  ck_assert(e.has_quorum); /* 3 of 5 */
  ck_assert_str_eq(e.reason, "lowest id among 3 eligible alive members; quorum 3 of 5");

  for (int i = 0; i < 5; i++)
    if (strcmp(v[i].meta.name, "n2") == 0) v[i].state = EA_STATE_DEAD;
  ea_elect(v, 5, &g, &e);
  ck_assert(e.have); /* still a controller-to-be, but it must not act */
  ck_assert(!e.has_quorum);
  ck_assert_str_eq(e.reason, "no quorum: 2 of 5; lowest id among 2 eligible alive members");

  /* A suspect member still counts as alive for the quorum. */
  for (int i = 0; i < 5; i++)
    if (strcmp(v[i].meta.name, "n2") == 0) v[i].state = EA_STATE_SUSPECT;
  ea_elect(v, 5, &g, &e);
  ck_assert(e.has_quorum);
}
END_TEST

/* Members that left gracefully do not vote: 2 alive of 5 is a quorum once
 * two of the others drained (2 of 3). */
START_TEST(test_quorum_excludes_left) {
  ea_member v[5];
  for (int i = 0; i < 5; i++) v[i] = mk(i, EA_STATE_ALIVE, "worker");
  ea_node_id gen[5];
  for (int i = 0; i < 5; i++) gen[i] = v[i].id;
  v[2].state = EA_STATE_LEFT;
  v[3].state = EA_STATE_LEFT;
  v[4].state = EA_STATE_DEAD;
  shuffle(v, 5);
  ea_election_gen g = {gen, 5, false};
  ea_election e;
  ea_elect(v, 5, &g, &e);
  ck_assert(e.has_quorum);
  ck_assert_str_eq(e.reason, "lowest id among 2 eligible alive members; quorum 2 of 3");
  /* A generation member this view never heard of (reaped) votes, absent. */
  ea_node_id gen2[6];
  memcpy(gen2, gen, sizeof gen);
  memset(&gen2[5], 0xee, sizeof gen2[5]);
  ea_election_gen g2 = {gen2, 6, false};
  ea_elect(v, 5, &g2, &e);
  ck_assert(!e.has_quorum);
  ck_assert_str_eq(e.reason, "no quorum: 2 of 4; lowest id among 2 eligible alive members");
  /* Everyone of the generation left: nobody can object. */
  for (int i = 0; i < 5; i++) v[i].state = EA_STATE_LEFT;
  ea_member fresh[6];
  memcpy(fresh, v, sizeof v);
  fresh[5] = mk(9, EA_STATE_ALIVE, "worker");
  ea_elect(fresh, 6, &g, &e);
  ck_assert(e.have);
  ck_assert(e.has_quorum);
  ck_assert_int_eq(ea_node_id_cmp(&e.controller, &fresh[5].id), 0);
}
END_TEST

/* An even split is not a majority; a duplicate id in the generation does
 * not vote twice. */
START_TEST(test_quorum_even_split_and_duplicates) {
  ea_member v[4];
  for (int i = 0; i < 4; i++) v[i] = mk(i, i < 2 ? EA_STATE_ALIVE : EA_STATE_DEAD, "worker");
  ea_node_id gen[5];
  for (int i = 0; i < 4; i++) gen[i] = v[i].id;
  gen[4] = v[0].id;
  shuffle(v, 4);
  ea_election_gen g = {gen, 4, false};
  ea_election e;
  ea_elect(v, 4, &g, &e);
  ck_assert(!e.has_quorum);
  ck_assert_str_eq(e.reason, "no quorum: 2 of 4; lowest id among 2 eligible alive members");
  ea_election_gen gd = {gen, 5, false};
  ea_elect(v, 4, &gd, &e);
  ck_assert(!e.has_quorum);
  ck_assert_str_eq(e.reason, "no quorum: 2 of 4; lowest id among 2 eligible alive members");
}
END_TEST

/* quorum: none — availability over consistency; an empty generation (none
 * formed yet) has nothing to be a majority of. */
START_TEST(test_quorum_none_and_no_generation) {
  ea_member v[4];
  for (int i = 0; i < 4; i++) v[i] = mk(i, i == 3 ? EA_STATE_ALIVE : EA_STATE_DEAD, "worker");
  ea_node_id gen[4];
  for (int i = 0; i < 4; i++) gen[i] = v[i].id;
  shuffle(v, 4);
  ea_election e;
  ea_election_gen none = {gen, 4, true};
  ea_elect(v, 4, &none, &e);
  ck_assert(e.have);
  ck_assert(e.has_quorum);
  ck_assert_str_eq(e.reason, "lowest id among 1 eligible alive member");
  ea_election_gen empty = {gen, 0, false};
  ea_elect(v, 4, &empty, &e);
  ck_assert(e.has_quorum);
  ea_election_gen majority = {gen, 4, false};
  ea_elect(v, 4, &majority, &e);
  ck_assert(!e.has_quorum);
  ck_assert_str_eq(e.reason, "no quorum: 1 of 4; lowest id among 1 eligible alive member");
}
END_TEST

/* The id order is bytewise from the first byte (ea_node_id_cmp). */
START_TEST(test_id_order_is_bytewise) {
  ea_member a = mk(0, EA_STATE_ALIVE, "worker"), b = mk(0, EA_STATE_ALIVE, "worker");
  a.id.b[0] = 0x02;
  a.id.b[1] = 0x00;
  b.id.b[0] = 0x01;
  b.id.b[1] = 0xff;
  ea_member v[2] = {a, b};
  ea_election e;
  ea_elect(v, 2, NULL, &e);
  ck_assert_int_eq(ea_node_id_cmp(&e.controller, &b.id), 0);
}
END_TEST

static Suite *election_suite(void) {
  Suite *s = suite_create("election");
  TCase *t = tcase_create("elect");
  tcase_add_checked_fixture(t, setup, NULL);
  tcase_add_test(t, test_lowest_alive_id_wins);
  tcase_add_test(t, test_observers_never_elected);
  tcase_add_test(t, test_no_eligible_member);
  tcase_add_test(t, test_suspect_counts_dead_and_left_do_not);
  tcase_add_test(t, test_quorum_majority);
  tcase_add_test(t, test_quorum_excludes_left);
  tcase_add_test(t, test_quorum_even_split_and_duplicates);
  tcase_add_test(t, test_quorum_none_and_no_generation);
  tcase_add_test(t, test_id_order_is_bytewise);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  const char *e = getenv("EA_SEED");
  g_seed = (e && *e) ? strtoull(e, NULL, 0) : (uint64_t)time(NULL);
  printf("election: seed %" PRIu64 " (EA_SEED=%" PRIu64 " to replay)\n", g_seed, g_seed);
  fflush(stdout);
  SRunner *sr = srunner_create(election_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
