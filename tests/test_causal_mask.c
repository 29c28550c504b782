/*
 * The causal mask against what could get through it (docs/semantics.md §8),
 * on every attention route and the backends this CPU runs:
 *
 *   * softmax scales of every sign (positive, 0, negative): the mask follows
 *     the scaling, so a masked key stays -inf (-inf * -0.1 would be +inf,
 *     -inf * 0 NaN);
 *   * inf and NaN in the keys a query may not see (the last s_q - 1 of a
 *     decode request, the keys past a flash-attention query's diagonal), in
 *     K or in V: they reach no row that may not see them (0 * inf in P.V
 *     would be NaN there), and the rows that see them get what the oracle's
 *     plain arithmetic gives (NaN for NaN, the same infinity for one);
 *   * inf and NaN in one row of q: they stay in that row.
 *
 * Decode with s_q 2 and 3 (scales) or 2 to 4 (inf and NaN), unsplit and
 * split (the LSE combine), and flash attention (causal, q shorter than, as
 * long as and longer than k), against the double-precision oracles
 * (decode_cases.h, flash_attn_cases.h); test_prefill.c has mla_prefill's
 * paths. A route no backend of this CPU has gets a backend built on its
 * kernel's ref twin (the AMX tiles', vdpbf16ps' or FMLAL's arithmetic), so
 * every test runs every route and asserts so. A backend of ref kernels runs
 * a case only where no backend before it took its route (ref's plain
 * kernels have their own suites).
 */
#include "oracle.h"
#include "routes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the scale's sign ---------------------------------------------------------------- */

static const float scales[] = {0.45f, 0.0f, -0.45f};

/* By hand: bf16 q and cache, B 1, s_q 2, L 2, R 0, keys (1, .5), (-1, 2),
 * (.25, -.75), scale 0: query 0 sees the first two keys with equal
 * weights, so its out is (0, 1.25) and its lse ln 2, exactly, on every
 * route, unsplit and with each key its own split (the weights, and the
 * merge's, are 1/2). A mask before the scale gave it (0, 0). */
typedef struct by_hand {
    dcase *c;
    routes_seen here, *seen;
} by_hand;

static void run_by_hand(const mla_backend_desc *b, void *ctx)
{
    static const mla_decode_sched_params each_key = {.num_parts = 3, .block_n = 1,
                                                     .split_blocks = 1};
    by_hand *r = ctx;
    dcase *c = r->c;
    const mla_config cfg = case_config_of(&c->args);
    if (!route_takes_case(b, &cfg, &r->here, r->seen))
        return;
    for (int k = 0; k < 2; k++) {
        c->args.sched = k == 0 ? &route_unsplit : &each_key;
        dcase_run_on(c, b, 2, 0);
        const float out0 = oracle_load(MLA_DTYPE_BF16, c->args.out, 0, 1.0f);
        const float out1 = oracle_load(MLA_DTYPE_BF16, c->args.out, 1, 1.0f);
        if (out0 != 0.0f || out1 != 1.25f || fabsf(c->args.lse[0] - logf(2.0f)) > 1e-6f)
            fail_msg("%s: %s, %s: query 0 got (%g, %g), lse %g; want (0, 1.25), lse ln 2",
                     b->name, c->label, k == 0 ? "unsplit" : "split", out0, out1, c->args.lse[0]);
    }
    c->args.sched = NULL;
}

static void test_scale_0_by_hand(void **state)
{
    (void)state;
    static const float keys[3][2] = {{1.0f, 0.5f}, {-1.0f, 2.0f}, {0.25f, -0.75f}};
    dspec s = {.q_dtype = MLA_DTYPE_BF16, .cache_dtype = MLA_DTYPE_BF16, .s_q = 2, .H = 1, .L = 2,
               .block_size = 16, .num_reqs = 1, .lens = {3}, .form = Q_CONCAT, .lse = true};
    dcase c;
    dcase_make(&c, &s, false);
    for (int64_t j = 0; j < 3; j++)
        for (int64_t d = 0; d < 2; d++)
            oracle_store(MLA_DTYPE_BF16, c.pg.cache.data, paged_row(&c.pg, 0, j) + d, keys[j][d],
                         1.0f);
    c.args.scale = 0.0f;
    dcase_inputs_changed(&c);
    routes_seen seen = {0};
    by_hand r = {.c = &c, .seen = &seen};
    const mla_config cfg = case_config_of(&c.args);
    assert_true(support_each_backend(MLA_OP_DECODE, &cfg, run_by_hand, &r) > 0);
    dcase_free(&c);
    /* bf16 q and cache: f32, bf16-dot and amx-bf16 */
    assert_true(seen.ran[0] && seen.ran[1] && seen.ran[2]);
}

/* Every route, s_q 2 and 3, unsplit and split, each scale: against the
 * oracle. */
static void test_decode_scale_signs(void **state)
{
    (void)state;
    routes_seen seen = {0};
    for (int d = 0; d < ROUTE_DECODE_DTYPES; d++)
        for (int64_t s_q = 2; s_q <= 3; s_q++)
            for (int k = 0; k < COUNT(scales); k++) {
                const route_dtypes *dt = &route_decode_dtypes[d];
                dspec s = {.q_dtype = dt->q, .cache_dtype = dt->cache, .s_q = s_q, .H = 3,
                           .L = 40, .R = 8, .block_size = 16, .form = (q_form)((d + k) % 3),
                           .pad = s_q % 2 == 0, .lse = true, .bf16_compute = dt->bf16_compute};
                dspec_edge_lens(&s);
                dcase c;
                dcase_make(&c, &s, false);
                c.args.scale = scales[k];
                dcase_inputs_changed(&c);
                case_label_add(c.label, sizeof c.label, ", scale %g", (double)scales[k]);
                route_decode_everywhere(&c, true, &seen);
                dcase_free(&c);
            }
    route_expect_every(&seen, "decode, scales of every sign");
}

/* Flash attention, causal, each scale: q shorter than k, as long, longer
 * (its first rows see nothing), and blocks of 65 rows over 300 keys. */
static void test_flash_scale_signs(void **state)
{
    (void)state;
    routes_seen seen = {0};
    for (int d = 0; d < COUNT(route_flash_dtypes); d++)
        for (int k = 0; k < COUNT(scales); k++) {
            fa_spec s = {.dtype = route_flash_dtypes[d], .H = 2, .qk_dim = 40, .v_dim = 24,
                         .rope_dim = 8, .causal = true, .scale = scales[k], .num_seqs = 4,
                         .q_lens = {3, 5, 6, 130}, .k_lens = {7, 5, 4, 300},
                         .layout = (fa_layout)((d + k) % FA_LAYOUTS), .lse = true, .threads = 2};
            fa_case c;
            fa_make(&c, &s, true);
            route_flash_everywhere(&c, &seen);
            fa_free(&c);
        }
    route_expect_every(&seen, "flash attention, scales of every sign");
}

/* ---- inf and NaN behind the mask ----------------------------------------------------- */

static const float poisons[] = {NAN, INFINITY, -INFINITY};

/* A key that query `first` of a request of len keys and s_q queries is the
 * first to see (queries before it may not): len - s_q + first, for a first
 * in [1, s_q) that makes it a key; -1 if none does. */
static int64_t hidden_key(int64_t len, int64_t s_q, int64_t first)
{
    for (int64_t i = first; i < s_q; i++)
        if (len - s_q + i >= 0)
            return len - s_q + i;
    return -1;
}

/* Decode: in each request, an inf or NaN in one key its earlier queries may
 * not see, in its V part (the latent, which K holds too) or in its K-only
 * part (the rope); unsplit, and split where the outcome does not depend on
 * the cut: an infinite latent value can give a row logit -inf and weight 0,
 * and 0 * inf in P.V is NaN unless a split holds no other key for that row
 * (then the split is empty and its V unread, docs/semantics.md §8).
 * Lengths put hidden keys in a tile of their own after the 128- and 256-key
 * tiles (129, 130, 257, 258: the tile's rows rescale O with no key every
 * row sees), in the first key (1) and around a block; 50 heads make two
 * passes over the cache, the second starting inside a query's heads. */
static void decode_poisoned(const route_dtypes *dt, int64_t s_q, float poison, bool in_v,
                            routes_seen *seen)
{
    const bool wide = s_q == 3 && isnan(poison);
    dspec s = {.q_dtype = dt->q, .cache_dtype = dt->cache, .s_q = s_q, .H = wide ? 50 : 3,
               .L = 40, .R = 8, .block_size = 16, .num_reqs = 8,
               .lens = {0, 1, 130, 15, 258, 17, 129, 257}, .form = (q_form)(s_q % 3),
               .pad = in_v, .lse = true, .bf16_compute = dt->bf16_compute};
    dcase c;
    dcase_make(&c, &s, false);
    for (int64_t b = 0; b < s.num_reqs; b++) {
        /* even requests: the last key, so the tail tiles of 130 and 258 keys
         * hold a finite hidden key before it */
        const int64_t first = b % 2 == 0 ? s_q - 1 : 1 + (b / 2 + (int64_t)in_v) % (s_q - 1);
        const int64_t j = hidden_key(c.lens[b], s_q, first);
        if (j < 0)
            continue;
        const int64_t d = in_v ? (b * 7) % s.L : s.L + (b * 3) % s.R;
        route_store_poison(s.cache_dtype, c.pg.cache.data, paged_row(&c.pg, b, j) + d, poison,
                     c.pg.cache.scale);
    }
    dcase_inputs_changed(&c);
    case_label_add(c.label, sizeof c.label, ", %g in the %s part of a hidden key", (double)poison,
              in_v ? "V (latent)" : "K-only (rope)");
    route_decode_everywhere(&c, !(in_v && isinf(poison)), seen);
    dcase_free(&c);
}

static void test_decode_nonfinite_hidden(void **state)
{
    (void)state;
    routes_seen seen = {0};
    for (int d = 0; d < ROUTE_DECODE_DTYPES; d++)
        for (int64_t s_q = 2; s_q <= 4; s_q++)
            for (int p = 0; p < COUNT(poisons); p++) {
                decode_poisoned(&route_decode_dtypes[d], s_q, poisons[p], true, &seen);
                decode_poisoned(&route_decode_dtypes[d], s_q, poisons[p], false, &seen);
            }
    route_expect_every(&seen, "decode, inf and NaN in hidden keys");
}

/* Flash attention, causal: in each request of two or more queries, inf or
 * NaN in K (k_nope of one head, or the shared k_pe) and in V of keys only
 * later queries see; some requests longer than a block of rows and a tile
 * of keys. */
typedef enum flash_part { IN_K_NOPE, IN_K_PE, IN_V } flash_part;
static const char *const part_names[3] = {"k_nope", "k_pe", "v"};

static void poison_flash(fa_case *c, float poison, flash_part part)
{
    const fa_spec *s = &c->s;
    const mla_flash_attn_args *a = &c->args;
    for (int64_t b = 0; b < s->num_seqs; b++) {
        const int64_t n_q = s->q_lens[b], n_k = s->k_lens[b];
        /* keys the second, a middle and the last query are the first to see
         * (the last one, of a long request, in a tile no row of its block
         * sees all of) */
        const int64_t keys[3] = {hidden_key(n_k, n_q, 1), hidden_key(n_k, n_q, n_q / 2 + 1),
                                 hidden_key(n_k, n_q, n_q - 1)};
        for (int x = 0; x < 3; x++) {
            const int64_t j = c->cu_k[b] + keys[x], h = (b + x) % s->H, e = b * 5 + x;
            if (keys[x] < 0)
                continue;
            if (part == IN_K_NOPE)
                oracle_store(s->dtype, c->k, j * a->k_token_stride + h * a->k_head_stride +
                             e % (s->qk_dim - s->rope_dim), poison, 1.0f);
            else if (part == IN_K_PE)
                oracle_store(s->dtype, c->k_pe, j * a->k_pe_token_stride + e % s->rope_dim,
                             poison, 1.0f);
            else
                oracle_store(s->dtype, c->v, j * a->v_token_stride + h * a->v_head_stride +
                             e % s->v_dim, poison, 1.0f);
        }
    }
    c->inputs_sum = fa_inputs_checksum(c);
    fa_oracle(c);
    case_label_add(c->label, sizeof c->label, ", %g in %s of hidden keys", (double)poison,
              part_names[part]);
}

static void test_flash_nonfinite_hidden(void **state)
{
    (void)state;
    routes_seen seen = {0};
    for (int d = 0; d < COUNT(route_flash_dtypes); d++)
        for (int p = 0; p < COUNT(poisons); p++)
            for (int part = IN_K_NOPE; part <= IN_V; part++) {
                fa_spec s = {.dtype = route_flash_dtypes[d], .H = 2, .qk_dim = 40, .v_dim = 24,
                             .rope_dim = 8, .causal = true, .scale = 0.3f, .num_seqs = 5,
                             .q_lens = {2, 3, 5, 130, 200}, .k_lens = {7, 3, 9, 300, 200},
                             .layout = (fa_layout)((d + part) % FA_LAYOUTS), .lse = true,
                             .threads = 2};
                fa_case c;
                fa_make(&c, &s, false);
                poison_flash(&c, poisons[p], (flash_part)part);
                route_flash_everywhere(&c, &seen);
                fa_free(&c);
            }
    route_expect_every(&seen, "flash attention, inf and NaN in hidden keys");
}

/* inf or NaN in one element of q, of one (token, head) row per request: it
 * stays in that row (the oracle's other rows are finite), which gets the
 * oracle's answer. Decode, unsplit and split, s_q 2 to 4. */
static void test_decode_nonfinite_q(void **state)
{
    (void)state;
    routes_seen seen = {0};
    for (int p = 0; p < COUNT(poisons); p++)
        for (int d = 0; d < ROUTE_DECODE_DTYPES; d++) {
            const route_dtypes *dt = &route_decode_dtypes[d];
            dspec s = {.q_dtype = dt->q, .cache_dtype = dt->cache, .s_q = 2 + p, .H = 3, .L = 40,
                       .R = 8, .block_size = 16, .form = (q_form)(d % 3), .lse = true,
                       .bf16_compute = dt->bf16_compute};
            dspec_edge_lens(&s);
            dcase c;
            dcase_make(&c, &s, false);
            for (int64_t b = 0; b < s.num_reqs; b++)
                dcase_store_q(&c, b * s.s_q + b % s.s_q, b % s.H, b * 7 % (s.L + s.R),
                              poisons[p]);
            dcase_inputs_changed(&c);
            case_label_add(c.label, sizeof c.label, ", %g in q", (double)poisons[p]);
            route_decode_everywhere(&c, true, &seen);
            dcase_free(&c);
        }
    route_expect_every(&seen, "decode, inf and NaN in q");
}

/* The same in flash attention, causal and not. */
static void test_flash_nonfinite_q(void **state)
{
    (void)state;
    routes_seen seen = {0};
    for (int p = 0; p < COUNT(poisons); p++)
        for (int d = 0; d < COUNT(route_flash_dtypes); d++) {
            fa_spec s = {.dtype = route_flash_dtypes[d], .H = 2, .qk_dim = 40, .v_dim = 24,
                         .rope_dim = 8, .causal = p != 1, .scale = 0.3f, .num_seqs = 3,
                         .q_lens = {3, 130, 1}, .k_lens = {7, 130, 0},
                         .layout = (fa_layout)((d + p) % FA_LAYOUTS), .lse = true, .threads = 2};
            fa_case c;
            fa_make(&c, &s, false);
            mla_flash_attn_args *a = &c.args;
            for (int64_t b = 0; b < s.num_seqs; b++) {
                const int64_t t = c.cu_q[b] + (b * 37) % s.q_lens[b], h = b % s.H;
                oracle_store(s.dtype, (void *)a->q, t * a->q_token_stride + h * a->q_head_stride +
                             (b * 11) % s.qk_dim, poisons[p], 1.0f);
            }
            c.inputs_sum = fa_inputs_checksum(&c);
            fa_oracle(&c);
            case_label_add(c.label, sizeof c.label, ", %g in q", (double)poisons[p]);
            route_flash_everywhere(&c, &seen);
            fa_free(&c);
        }
    route_expect_every(&seen, "flash attention, inf and NaN in q");
}

int main(void)
{
    route_register_twins();
    const struct CMUnitTest tests[] = {
        CASE_TEST(test_scale_0_by_hand),
        CASE_TEST(test_decode_scale_signs),
        FA_TEST(test_flash_scale_signs),
        CASE_TEST(test_decode_nonfinite_hidden),
        FA_TEST(test_flash_nonfinite_hidden),
        CASE_TEST(test_decode_nonfinite_q),
        FA_TEST(test_flash_nonfinite_q),
    };
    case_apply_filter();
    return cmocka_run_group_tests_name("causal_mask", tests, NULL, NULL);
}
