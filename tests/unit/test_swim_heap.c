/* Check suite for the indexed min-heap under the dissemination queue and the
 * suspicion timers (membership/swim_heap.c).
 *
 * Promises: the top is always the smallest key; an arbitrary id can be
 * removed or re-keyed (up or down) and the order holds; pos[] always says
 * where each id is (EA__NONE when absent); growing the capacity keeps what
 * is there; equal keys come out in an order fixed by the calls alone, so the
 * simulator replays.  Each case checks the heap shape after every operation
 * and compares with a plain array model.  Seeded (EA_SEED=… replays).
 */
#include "swim_heap.h"
#include "swim_unit.h"

#include <check.h>

/* Heap shape and the index both hold. */
static void assert_valid(const ea__heap *h) {
  for (uint32_t i = 1; i < h->n; i++) ck_assert_uint_le(h->items[(i - 1) / 2].key, h->items[i].key);
  uint32_t present = 0;
  for (uint32_t id = 0; id < h->cap; id++) {
    if (h->pos[id] == EA__NONE) continue;
    present++;
    ck_assert_uint_lt(h->pos[id], h->n);
    ck_assert_uint_eq(h->items[h->pos[id]].id, id);
  }
  ck_assert_uint_eq(present, h->n);
}

/* Model: key per id, UINT64_MAX when absent. */
#define N 512
static uint64_t model[N];

static uint64_t model_min(void) {
  uint64_t m = UINT64_MAX;
  for (int i = 0; i < N; i++)
    if (model[i] < m) m = model[i];
  return m;
}

START_TEST(test_pops_in_key_order) {
  ea__heap h;
  ea__heap_init(&h);
  ck_assert_int_eq(ea__heap_reserve(&h, N), 0);
  ck_assert_ptr_null(ea__heap_top(&h));
  for (uint32_t id = 0; id < N; id++) ea__heap_push(&h, id, rnd() % 1000);
  assert_valid(&h);
  bool seen[N] = {false};
  uint64_t last = 0;
  for (uint32_t k = 0; k < N; k++) {
    const ea__heap_item *t = ea__heap_top(&h);
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_ge(t->key, last);
    last = t->key;
    ck_assert(!seen[t->id]);
    seen[t->id] = true;
    uint32_t id = t->id; /* t points into the heap: read it before the removal */
    ea__heap_remove(&h, id);
    ck_assert(!ea__heap_contains(&h, id));
  }
  ck_assert_uint_eq(h.n, 0);
  ck_assert_ptr_null(ea__heap_top(&h));
  ea__heap_close(&h);
}
END_TEST

START_TEST(test_remove_any_id_keeps_order) {
  ea__heap h;
  ea__heap_init(&h);
  ck_assert_int_eq(ea__heap_reserve(&h, N), 0);
  for (uint32_t id = 0; id < N; id++) {
    model[id] = rnd() % 100000;
    ea__heap_push(&h, id, model[id]);
  }
  for (uint32_t k = 0; k < N / 2; k++) {
    uint32_t id = rnd_below(N);
    if (model[id] == UINT64_MAX) continue;
    ea__heap_remove(&h, id);
    model[id] = UINT64_MAX;
    ck_assert(!ea__heap_contains(&h, id));
    assert_valid(&h);
    ck_assert_uint_eq(ea__heap_top(&h)->key, model_min());
  }
  for (uint32_t id = 0; id < N; id++)
    ck_assert(ea__heap_contains(&h, id) == (model[id] != UINT64_MAX));
  ea__heap_close(&h);
}
END_TEST

START_TEST(test_update_moves_both_ways) {
  ea__heap h;
  ea__heap_init(&h);
  ck_assert_int_eq(ea__heap_reserve(&h, N), 0);
  for (uint32_t id = 0; id < N; id++) {
    model[id] = 1000 + rnd() % 1000;
    ea__heap_push(&h, id, model[id]);
  }
  /* The current top made the largest: it must sink. */
  uint32_t top = ea__heap_top(&h)->id;
  ea__heap_update(&h, top, 5000);
  model[top] = 5000;
  assert_valid(&h);
  ck_assert_uint_ne(ea__heap_top(&h)->id, top);
  /* Some id made the smallest: it must rise to the top. */
  uint32_t any = rnd_below(N);
  ea__heap_update(&h, any, 1);
  model[any] = 1;
  assert_valid(&h);
  ck_assert_uint_eq(ea__heap_top(&h)->id, any);
  for (int k = 0; k < 2000; k++) {
    uint32_t id = rnd_below(N);
    model[id] = rnd() % 3000;
    ea__heap_update(&h, id, model[id]);
    ck_assert_uint_eq(h.items[h.pos[id]].key, model[id]);
    ck_assert_uint_eq(ea__heap_top(&h)->key, model_min());
  }
  assert_valid(&h);
  ea__heap_close(&h);
}
END_TEST

START_TEST(test_random_ops_match_model) {
  ea__heap h;
  ea__heap_init(&h);
  for (int i = 0; i < N; i++) model[i] = UINT64_MAX;
  uint32_t cap = 0;
  for (int step = 0; step < 20000; step++) {
    uint32_t id = rnd_below(N);
    if (id >= cap) {
      uint32_t nc = cap ? cap * 2 : 8;
      while (nc <= id) nc *= 2;
      ck_assert_int_eq(ea__heap_reserve(&h, nc), 0);
      cap = nc;
    }
    uint64_t key = rnd() % 64; /* many ties */
    if (model[id] == UINT64_MAX) {
      ea__heap_push(&h, id, key);
      model[id] = key;
    } else if (rnd() & 1) {
      ea__heap_remove(&h, id);
      model[id] = UINT64_MAX;
    } else {
      ea__heap_update(&h, id, key);
      model[id] = key;
    }
    uint64_t m = model_min();
    if (m == UINT64_MAX)
      ck_assert_ptr_null(ea__heap_top(&h));
    else
      ck_assert_uint_eq(ea__heap_top(&h)->key, m);
    if (step % 1000 == 0) assert_valid(&h);
  }
  assert_valid(&h);
  ea__heap_close(&h);
}
END_TEST

/* Same calls, same order of equal keys: the replay promise. */
START_TEST(test_equal_keys_replay) {
  ea__heap a, b;
  ea__heap_init(&a);
  ea__heap_init(&b);
  ck_assert_int_eq(ea__heap_reserve(&a, 64), 0);
  ck_assert_int_eq(ea__heap_reserve(&b, 64), 0);
  uint64_t save = g_rng;
  for (int pass = 0; pass < 2; pass++) {
    ea__heap *h = pass ? &b : &a;
    g_rng = save;
    for (uint32_t id = 0; id < 64; id++) ea__heap_push(h, id, rnd() % 3);
    for (int k = 0; k < 32; k++) ea__heap_remove(h, h->items[rnd_below(h->n)].id);
  }
  ck_assert_uint_eq(a.n, b.n);
  for (uint32_t i = 0; i < a.n; i++) {
    ck_assert_uint_eq(a.items[i].id, b.items[i].id);
    ck_assert_uint_eq(a.items[i].key, b.items[i].key);
  }
  /* And every id with the smallest key comes out, each once. */
  bool seen[64] = {false};
  uint64_t last = 0;
  while (a.n) {
    const ea__heap_item *t = ea__heap_top(&a);
    ck_assert_uint_ge(t->key, last);
    last = t->key;
    ck_assert(!seen[t->id]);
    seen[t->id] = true;
    ea__heap_remove(&a, t->id);
  }
  ea__heap_close(&a);
  ea__heap_close(&b);
}
END_TEST

START_TEST(test_reserve_keeps_contents) {
  ea__heap h;
  ea__heap_init(&h);
  ck_assert_int_eq(ea__heap_reserve(&h, 16), 0);
  for (uint32_t id = 0; id < 16; id += 2) ea__heap_push(&h, id, 100 - id);
  ck_assert_int_eq(ea__heap_reserve(&h, 8), 0); /* never shrinks */
  ck_assert_uint_eq(h.cap, 16);
  ck_assert_int_eq(ea__heap_reserve(&h, 4096), 0);
  ck_assert_uint_eq(h.cap, 4096);
  assert_valid(&h);
  ck_assert_uint_eq(h.n, 8);
  for (uint32_t id = 16; id < 4096; id++) ck_assert(!ea__heap_contains(&h, id));
  ea__heap_push(&h, 4095, 0);
  ck_assert_uint_eq(ea__heap_top(&h)->id, 4095);
  ck_assert(!ea__heap_contains(&h, 5000)); /* beyond cap: absent, not a crash */
  ea__heap_close(&h);
  ck_assert_uint_eq(h.cap, 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("swim_heap");
  TCase *t = tcase_create("heap");
  tcase_add_checked_fixture(t, seed_rng, NULL);
  tcase_add_test(t, test_pops_in_key_order);
  tcase_add_test(t, test_remove_any_id_keeps_order);
  tcase_add_test(t, test_update_moves_both_ways);
  tcase_add_test(t, test_random_ops_match_model);
  tcase_add_test(t, test_equal_keys_replay);
  tcase_add_test(t, test_reserve_keeps_contents);
  suite_add_tcase(s, t);
  return run_suite(s, "swim_heap");
}
