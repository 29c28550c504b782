/*
 * The packed GEMM driver: C = A . W^T over column segments, with W stored as
 * nn.Linear stores it (one row of k elements per output column), written
 * once here on the backend's gemm_f32 (or a bf16 pair) micro-kernel.
 *
 * Both operands are packed once per call, shared by the threads: A widened
 * to f32 in row blocks stored column by column (a micro-kernel tile's
 * broadcasts read consecutive floats), W transposed into strips of
 * MLA_PACKED_GEMM_NR columns, each [k][strip] contiguous (a strip's k block
 * stays in L1 while the tiles of a row block pass over it). Each thread
 * then takes a balanced run of (row block, segment) tiles, row blocks outer
 * where W was packed ahead (a row block of A stays in L2 across the
 * segments) and segments outer where the call packs W (a segment stays in
 * L2 across the row blocks), and runs each
 * tile k block by k block, later blocks resuming with c_scale = ones
 * (exact), in the thread's f32 tile, which then streams out to C rounded
 * once to its dtype. So every element of C is one f32 FMA chain in k
 * order, whatever the tiling or the thread count: gemm_f32's bits on the
 * widened operands.
 *
 * The bf16 pair routes (A and W bf16, and the backend has gemm_bf16tile or
 * gemm_bf16dot) pack W as bf16 pairs along the depth instead, an odd k
 * completed by a zero pair, and give that kernel's arithmetic. The dot
 * route packs A in pairs by micro-panel, as above; the tile route (AMX)
 * keeps A's rows whole, [m][k2], which tiles load 16 rows at a time, packs
 * W in strips a segment wide and runs a row block x segment per call. Its
 * k blocks are whole 16-pair steps (MLA_PACKED_GEMM_KC is a multiple of
 * 32), so it gives the bits of one gemm_bf16tile call over the whole depth.
 */
#ifndef MLA_COMMON_GEMM_PACKED_H
#define MLA_COMMON_GEMM_PACKED_H

#include "mla_backend.h"

/* One segment: columns [col, col + width) of C (width <= MLA_PACKED_GEMM_NC),
 * whose W rows are consecutive (ldw apart) from w, written to m rows of c,
 * ldc elements apart (c in the output dtype). The segments' columns tile
 * [0, n). */
typedef struct mla_gemm_segment {
    const void *w;
    void *c;
    int64_t ldc, col, width;
} mla_gemm_segment;

typedef struct mla_packed_gemm {
    int64_t m, n, k;       /* rows of A and C; columns of C; the depth       */
    const void *a;         /* m rows of k elements, lda apart               */
    int64_t lda;
    mla_dtype a_dtype;     /* f32, bf16 or f16                               */
    int64_t ldw;           /* elements between W rows                        */
    mla_dtype w_dtype;     /* f32, bf16 or f16                               */
    mla_dtype c_dtype;     /* f32, bf16 or f16: rounded once from f32        */
    int64_t segments;
    /* fills *out with segment `index` (0 .. segments - 1) */
    void (*segment)(const void *ctx, int64_t index, mla_gemm_segment *out);
    const void *ctx;
    /* W packed ahead by mla_gemm_pack_w (w_dot: as bf16 pairs), or NULL
     * to pack it per call from the segments' w */
    const void *w_packed;
    bool w_dot;
} mla_packed_gemm;

/* Bytes of workspace mla_gemm_packed needs for an m x n product of depth k
 * on `threads` threads, on either route (MLA_ALIGN bytes of slack
 * included), w_packed or not; false on overflow. */
bool mla_gemm_packed_workspace(int64_t m, int64_t n, int64_t k, bool w_packed, int threads,
                               int64_t *bytes);

/* Whether g runs on a bf16 pair route on kern when W is packed per call: A
 * and W bf16 and the backend has gemm_bf16tile or gemm_bf16dot. */
bool mla_gemm_packed_dot(const mla_kernels *kern, mla_dtype a_dtype, mla_dtype w_dtype);

/* The route's name, as the trace prints it (decode's names): "amx-bf16"
 * (tiles), "bf16-dot" (the other pair route) or "f32". */
const char *mla_gemm_packed_route_name(const mla_kernels *kern, bool dot);

/* Columns per packed strip of W on kern's route (dot: a bf16 pair route):
 * MLA_PACKED_GEMM_NC on the tile route, MLA_PACKED_GEMM_NR otherwise. A W
 * packed ahead is only valid for a route of the same strip. */
int64_t mla_gemm_packed_strip(const mla_kernels *kern, bool dot);

/* Elements of W packed (n columns of depth k in whole pairs): f32 floats,
 * or bf16 halves when dot; false on overflow. */
bool mla_gemm_packed_w_elems(int64_t n, int64_t k, int64_t *elems);

/* W of g (its segments' w) packed into dst as mla_gemm_packed reads it,
 * on up to `threads` threads: for calls that set w_packed = dst and
 * w_dot = dot. */
void mla_gemm_pack_w(const mla_kernels *kern, const mla_packed_gemm *g, bool dot, void *dst,
                     int threads);

/* Runs g with up to `threads` threads; workspace has the bytes above.
 * Segments' outputs must not overlap each other or the inputs. */
void mla_gemm_packed(const mla_kernels *kern, const mla_packed_gemm *g, void *workspace, int threads);

/* mla_up_proj (mla.h) on checked arguments: per head, its k_nope columns
 * then its v columns, each in pieces of at most MLA_PACKED_GEMM_NC, are
 * the segments. w_packed: kv_b_proj packed ahead by mla_up_proj_pack_run
 * (w_dot: as bf16 pairs), or NULL. workspace: mla_gemm_packed_workspace(S,
 * H * (P + V), L, w_packed != NULL, threads). */
void mla_up_proj_run(const mla_kernels *kern, const mla_up_proj_args *a, const void *w_packed,
                     bool w_dot, void *workspace, int threads);

/* a's kv_b_proj packed into dst (mla_gemm_packed_w_elems(H * (P + V), L)
 * elements) for mla_up_proj_run. */
void mla_up_proj_pack_run(const mla_kernels *kern, const mla_up_proj_args *a, bool dot, void *dst,
                          int threads);

#endif
