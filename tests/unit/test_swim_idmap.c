/* Check suite for the member table's id index (membership/swim_idmap.c).
 *
 * Promises: every id put is found at its index and no other id is; deletion
 * (backward shift, no tombstones) never hides an id that shares its probe
 * run, including runs that wrap past the table's end; a swap-remove is
 * followed by ea__idmap_move and the moved id is found at its new index;
 * ea__idmap_reserve keeps the table at most half full and keeps every
 * entry.  The ids are read from the caller's records (never copied), so the
 * cases keep a record array the way swim.c keeps its member table.  Seeded
 * (EA_SEED=… replays).
 */
#include "swim_idmap.h"
#include "swim_unit.h"

#include <check.h>

typedef struct {
  ea_node_id id; /* first, as swim.c's member */
  uint32_t payload;
} rec;

#define MAXR 4096
static rec recs[MAXR];
static uint32_t nrec;

static uint32_t find(const ea__idmap *m, const ea_node_id *id) {
  return ea__idmap_find(m, recs, sizeof *recs, id);
}

static void add(ea__idmap *m, const ea_node_id *id) {
  ck_assert_int_eq(ea__idmap_reserve(m, recs, sizeof *recs, nrec, nrec + 1), 0);
  recs[nrec].id = *id;
  recs[nrec].payload = nrec;
  ea__idmap_put(m, id, nrec);
  nrec++;
}

/* swim.c's reap: forget recs[i], move the last record into its place. */
static void swap_remove(ea__idmap *m, uint32_t i) {
  ea__idmap_del(m, recs, sizeof *recs, &recs[i].id);
  uint32_t last = --nrec;
  if (i != last) {
    recs[i] = recs[last];
    ea__idmap_move(m, recs, sizeof *recs, &recs[i].id, i);
  }
}

static void assert_all_found(const ea__idmap *m) {
  uint32_t used = 0;
  for (uint32_t s = 0; s <= m->mask; s++) used += m->slots[s] != 0;
  ck_assert_uint_eq(used, nrec);
  ck_assert_uint_le((uint64_t)nrec * 2, (uint64_t)m->mask + 1);
  for (uint32_t i = 0; i < nrec; i++) ck_assert_uint_eq(find(m, &recs[i].id), i);
}

/* A random id whose home slot in a table of mask+1 slots is `home`. */
static ea_node_id id_with_home(uint32_t home, uint32_t mask) {
  for (;;) {
    ea_node_id id = test_id(0);
    if (((uint32_t)ea__id_hash(&id) & mask) == home) return id;
  }
}

START_TEST(test_put_then_find) {
  ea__idmap m;
  nrec = 0;
  ck_assert_int_eq(ea__idmap_init(&m, 16), 0);
  ea_node_id absent = test_id(0xdead);
  ck_assert_uint_eq(find(&m, &absent), EA__NONE);
  for (uint32_t i = 0; i < 3000; i++) {
    ea_node_id id = test_id(i);
    add(&m, &id);
  }
  assert_all_found(&m); /* through eight doublings */
  ck_assert_uint_eq(find(&m, &absent), EA__NONE);
  ea__idmap_close(&m);
}
END_TEST

START_TEST(test_delete_keeps_probe_runs) {
  ea__idmap m;
  nrec = 0;
  ck_assert_int_eq(ea__idmap_init(&m, 16), 0);
  /* One run that wraps around the end: homes 14, 14, 15, 0, 0, 14. */
  uint32_t homes[] = {14, 14, 15, 0, 0, 14};
  for (size_t k = 0; k < sizeof homes / sizeof *homes; k++) {
    ea_node_id id = id_with_home(homes[k], 15);
    add(&m, &id);
  }
  ck_assert_uint_eq(m.mask, 15); /* 6 of 16: no growth, the run is real */
  assert_all_found(&m);
  /* Delete from the run's head, middle and wrapped tail, one at a time,
   * checking every survivor after each. */
  uint32_t order[] = {0, 3, 1, 4, 2, 5};
  ea_node_id gone[6];
  for (int k = 0; k < 6; k++) {
    uint32_t i = 0;
    while (recs[i].payload != order[k]) i++;
    gone[k] = recs[i].id;
    swap_remove(&m, i);
    assert_all_found(&m);
    for (int g = 0; g <= k; g++) ck_assert_uint_eq(find(&m, &gone[g]), EA__NONE);
  }
  for (uint32_t s = 0; s <= m.mask; s++) ck_assert_uint_eq(m.slots[s], 0); /* no tombstones */
  ea__idmap_close(&m);
}
END_TEST

START_TEST(test_random_churn_matches_model) {
  ea__idmap m;
  nrec = 0;
  ck_assert_int_eq(ea__idmap_init(&m, 16), 0);
  ea_node_id removed[256];
  uint32_t nremoved = 0;
  for (int step = 0; step < 20000; step++) {
    if (nrec < 8 || (nrec < MAXR - 1 && rnd_below(100) < 55)) {
      ea_node_id id = test_id((uint32_t)step);
      add(&m, &id);
    } else {
      uint32_t i = rnd_below(nrec);
      removed[nremoved++ % 256] = recs[i].id;
      swap_remove(&m, i);
    }
    if (step % 500 == 0) assert_all_found(&m);
  }
  assert_all_found(&m);
  for (uint32_t k = 0; k < (nremoved < 256 ? nremoved : 256); k++) {
    /* Random 128-bit ids do not repeat: a removed one is gone for good. */
    ck_assert_uint_eq(find(&m, &removed[k]), EA__NONE);
  }
  ea__idmap_close(&m);
}
END_TEST

START_TEST(test_reserve_half_full) {
  ea__idmap m;
  nrec = 0;
  ck_assert_int_eq(ea__idmap_init(&m, 16), 0);
  for (uint32_t i = 0; i < 100; i++) {
    ea_node_id id = test_id(i);
    add(&m, &id);
  }
  /* A push-pull about to merge 1000 records reserves once, up front. */
  ck_assert_int_eq(ea__idmap_reserve(&m, recs, sizeof *recs, nrec, 1100), 0);
  ck_assert_uint_ge((uint64_t)m.mask + 1, 2200);
  ck_assert_uint_eq((m.mask + 1) & m.mask, 0); /* a power of two */
  uint32_t cap = m.mask + 1;
  assert_all_found(&m);
  ck_assert_int_eq(ea__idmap_reserve(&m, recs, sizeof *recs, nrec, 50), 0);
  ck_assert_uint_eq(m.mask + 1, cap); /* never shrinks */
  ea_node_id absent = test_id(7);
  ea__idmap_del(&m, recs, sizeof *recs, &absent);     /* no-op */
  ea__idmap_move(&m, recs, sizeof *recs, &absent, 3); /* no-op */
  assert_all_found(&m);
  ea__idmap_close(&m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("swim_idmap");
  TCase *t = tcase_create("idmap");
  tcase_add_checked_fixture(t, seed_rng, NULL);
  tcase_add_test(t, test_put_then_find);
  tcase_add_test(t, test_delete_keeps_probe_runs);
  tcase_add_test(t, test_random_churn_matches_model);
  tcase_add_test(t, test_reserve_half_full);
  suite_add_tcase(s, t);
  return run_suite(s, "swim_idmap");
}
