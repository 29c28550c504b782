/*
 * The attention core that decode and prefill share: online-softmax state of
 * a block of query rows, the causal rule (in the softmax and in P.V), row
 * finishing and the LSE merge of partial results. Written once here; the
 * drivers (decode.c, and prefill's) own only their tiling and addressing.
 *
 * Layout. A pass holds up to MLA_ATTN_MAX_ROWS query rows, padded to `ld`
 * (a multiple of MLA_ATTN_ROW_MULTIPLE). A tile's scores are S [n keys][ld
 * rows]: the query rows lie along the vector lanes, so the softmax (max,
 * exp, sums) runs down contiguous rows with no horizontal reductions. The
 * output accumulator is O [ld][value width].
 *
 * Conventions (docs/semantics.md §8): LSEs are natural-log, f32; a row that
 * sees no key gets output 0 and LSE -inf; merging treats +inf and -inf as
 * empty, and two empty partials merge to 0 and -inf, never NaN. A key a row
 * may not see takes no part in it; inf and NaN in what it sees follow the
 * plain arithmetic and stay in that row.
 */
#ifndef MLA_COMMON_ATTENTION_H
#define MLA_COMMON_ATTENTION_H

#include "attention_route.h"
#include "mla_backend.h"

/* Online-softmax state of a pass's rows: running max m, running sum l, and
 * alpha, the factor the last tile rescaled O by (e^(old m - new m)). */
typedef struct mla_attn_rows {
    int64_t nr;       /* real rows                                        */
    int64_t ld;       /* rows padded: S's row stride and the arrays' length */
    float *m, *l, *alpha;
} mla_attn_rows;

/* A fresh pass: m = -inf, l = 0. O is left alone: the pass's first tile
 * starts it from 0 (its values product takes alpha NULL), and a row that
 * sees no key is finished as 0 without reading it. */
void mla_attn_rows_start(const mla_attn_rows *st);

/* The causal rule, bottom-right aligned (decode's MTP, prefill's new
 * tokens): pass row r is query (row0 + r) / rows_per_query, and query i sees
 * key j iff j <= last_key0 + i. Decode packs H heads per query
 * (rows_per_query = H) with last_key0 = seq_len - s_q; prefill runs one
 * head's tokens (rows_per_query = 1) with last_key0 = keys - queries. */
typedef struct mla_attn_causal {
    int64_t last_key0, row0, rows_per_query;
} mla_attn_causal;

/* One tile of the online softmax over S [n][ld], whose first key is key0:
 * scores times score_scale (skipped when 1), then the causal mask (when
 * `mask` is not NULL: -inf for every key a row may not see), the running
 * max, S -> e^(S - max), alpha, and the running sums of the first nr rows.
 * Masking follows the scaling, so a scale of 0 or below never turns a
 * masked -inf into +inf or NaN. A row whose max is still -inf uses 0 as its
 * max, so its exps are 0 and nothing becomes NaN. exp runs on the backend's
 * kernel over whole padded rows. */
void mla_attn_softmax_tile(const mla_kernels *k, const mla_attn_rows *st, float *s, int64_t n,
                           float score_scale, const mla_attn_causal *mask, int64_t key0);

/* The values product of one tile, O = alpha O + P^T V over the first v->n
 * keys from key0 (route->values), for a pass whose first nr rows took
 * `mask` in the tile's softmax (NULL: every row sees every key). A key the
 * mask hides from a row has P = 0 there, and 0 times an inf or NaN in the
 * key's V would be NaN in a row that may not see it: when a hidden key's V
 * holds one, the keys every row sees go through route->values and each
 * hidden key is added (in f32, P unrounded) only to the rows that see it.
 * Otherwise route->values runs alone, as without a mask. The check reads
 * only the hidden keys' V rows (decode: at most s_q - 1 of them). */
void mla_attn_tile_values(const mla_kernels *k, const mla_attn_route *route,
                          const mla_attn_values *v, const mla_attn_causal *mask, int64_t key0,
                          int64_t nr);

/* Keys at or past this are seen by none of the pass's first nr rows: where a
 * causal walk over the keys stops (tiles past the diagonal are skipped). */
int64_t mla_attn_causal_end(const mla_attn_causal *c, int64_t nr);

/* Whether keys [key0, key0 + n) hold one that some row of the pass may not
 * see: the tile straddles the diagonal and mla_attn_softmax_tile must mask
 * it. */
bool mla_attn_causal_straddles(const mla_attn_causal *c, int64_t key0, int64_t n);

/* Finishes one row: o = o * (scale / l) and returns the LSE m + ln l; a row
 * that saw no key (l == 0: none, or every logit -inf) becomes 0 with LSE
 * -inf. A NaN l (a NaN or +inf logit) is no empty row: o and the LSE come
 * out NaN. scale: 1, or decode's fp8 cache scale, which V left out. */
float mla_attn_finish_row(float *o, int64_t width, float m, float l, float scale);

/* The LSE of a finished row, m + ln l; -inf for a row that saw no key
 * (l == 0), NaN for a NaN l. */
float mla_attn_row_lse(float m, float l);

/* Merges `count` partial results of one row, in index order: partial q is
 * o + q * o_stride with LSE lse[q * lse_stride]. dst = sum_q w_q o_q with
 * w_q = e^(lse_q - max) / sum_q e^(lse_q - max), accumulated from 0 in q
 * order on k->scale_add_f32 (so every backend gives the same bits); returns
 * max + ln(sum). With `norm`, partial q is an unfinished row (O, not O / l:
 * decode's splits skip that pass) and its weight is also divided by its
 * l, norm[q * lse_stride]. Every weight is then multiplied by scale (1,
 * or decode's fp8 cache scale, which V left out). A partial whose LSE is
 * +inf or -inf is empty (weight 0, whatever its row holds); when all are,
 * dst = 0 and the result is -inf. A NaN LSE among them makes dst and the
 * result NaN. With count 2 and no norm this is merge_attn_states on one row
 * (docs/semantics.md §4).
 * dst must not overlap the partials. */
float mla_attn_merge_row(const mla_kernels *k, float *dst, int64_t width, const float *o,
                         int64_t o_stride, const float *lse, const float *norm,
                         int64_t lse_stride, int64_t count, float scale);

/* The weights of mla_attn_merge_row with count 2 (prefix, then suffix, with
 * LSEs lse[0] and lse[1]), each exp computed once: returns the merged LSE,
 * -inf when both sides are empty (then w is 0 and the row is 0, not a
 * weighted sum). k->merge_pair with these weights gives mla_attn_merge_row's
 * bits: merge_attn_states' row, read and written in its own dtype. */
float mla_attn_merge_weights(const float lse[2], float w[2]);

#endif
