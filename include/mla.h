/*
 * libmla — CPU kernels for DeepSeek-style Multi-head Latent Attention.
 *
 * This header is the server's API: what an inference server calls. The
 * extension API (kernel tables, backend registration, the CPU-reader seam)
 * is mla_backend.h. A § cites docs/semantics.md, the behaviour libmla
 * fixes (shapes, layouts, LSE and empty-row conventions, metadata).
 * Conventions:
 *   - Every function that can fail returns mla_status; on failure
 *     mla_last_error() holds a thread-local message and nothing was written.
 *   - Memory is the caller's. Sizes are int64_t, counted in elements.
 *   - The library never prints (except under MLA_LOG=1 and MLA_VERBOSE=1:
 *     docs/semantics.md §6) and never aborts.
 *   - Initialization happens on first use (or mla_init()), once, thread-safely.
 *   - Any number of threads may call at once, as long as no running call
 *     writes memory another reads or writes (a cache being written, outputs,
 *     workspaces, a chunk plan's own workspace); each call then gives the
 *     bits it gives alone (docs/semantics.md §8, concurrent calls).
 *   - Alignment: a tensor passed as void * with its dtype (q, k, v, out,
 *     kv_c, k_pe, the cache's data, weights, packed weights) and every
 *     workspace may start at any byte; 64-byte alignment is fastest. An
 *     array passed with a C element type (float *lse, int32_t *block_table,
 *     int64_t *slot_mapping, ...) needs that type's alignment, as C requires
 *     of any such pointer.
 *   - An output must not overlap an input it is computed from, unless its
 *     function says it may (mla_exp_f32 and mla_merge_attn_states in place).
 */
#ifndef MLA_H
#define MLA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MLA_API __attribute__((visibility("default")))
#else
#define MLA_API
#endif

/* The version of this header; mla_version() gives the version of the
 * library actually linked (they differ when libmla.so is replaced under a
 * built server). MAJOR changes with an incompatible ABI, and with it the
 * shared library's soname, libmla.so.MAJOR. MLA_VERSION orders versions as
 * one number (0.1.0 -> 100, 1.2.3 -> 10203), for #if tests. */
#define MLA_VERSION_MAJOR 0
#define MLA_VERSION_MINOR 1
#define MLA_VERSION_PATCH 0
#define MLA_VERSION (MLA_VERSION_MAJOR * 10000 + MLA_VERSION_MINOR * 100 + MLA_VERSION_PATCH)

/* "MAJOR.MINOR.PATCH" of the linked library ("0.1.0"): a static string,
 * never NULL. Needs no mla_init(). */
MLA_API const char *mla_version(void);

/* ------------------------------------------------------------------------ */
/* Status                                                                    */
/* ------------------------------------------------------------------------ */

typedef enum mla_status {
    MLA_OK = 0,
    MLA_ERR_INVALID_ARGUMENT, /* NULL, negative or inconsistent sizes        */
    MLA_ERR_OUT_OF_RANGE,     /* an index (block id, slot) outside its range */
    MLA_ERR_OVERFLOW,         /* a size product does not fit in int64_t      */
    MLA_ERR_UNSUPPORTED,      /* dtype / dims / block size not supported      */
    MLA_ERR_UNKNOWN_BACKEND,  /* no backend of that name; message lists names */
    MLA_ERR_BACKEND_INVALID,  /* backend cannot run this; message has reasons */
    MLA_ERR_NO_BACKEND,       /* no backend valid for this op and config      */
    MLA_ERR_ALREADY_EXISTS,   /* registering a name that is already taken     */
    MLA_ERR_CAPACITY,         /* a fixed-size table or caller buffer is full  */
    MLA_ERR_BAD_ENV,          /* an MLA_* environment variable is malformed   */
} mla_status;

/* Name of a status code ("MLA_ERR_OUT_OF_RANGE"). Never NULL. */
MLA_API const char *mla_status_str(mla_status status);

/* Message of the last failure on the calling thread ("" if none yet). */
MLA_API const char *mla_last_error(void);

/* ------------------------------------------------------------------------ */
/* Data types                                                                */
/* ------------------------------------------------------------------------ */

typedef enum mla_dtype {
    MLA_DTYPE_F32 = 0,
    MLA_DTYPE_BF16,
    MLA_DTYPE_F16,
    MLA_DTYPE_FP8_E4M3,
    MLA_DTYPE_FP8_E5M2,
    MLA_DTYPE_COUNT
} mla_dtype;

/* Bit of a dtype in a dtype set (a backend's q_dtypes / cache_dtypes). */
#define MLA_DTYPE_BIT(dt) (1u << (unsigned)(dt))

/* "f32", "bf16", "f16", "fp8_e4m3", "fp8_e5m2"; "?" for anything else. */
MLA_API const char *mla_dtype_name(mla_dtype dtype);

/* Bytes per element (4, 2, 2, 1, 1); 0 for anything else. */
MLA_API int64_t mla_dtype_size(mla_dtype dtype);

/* ------------------------------------------------------------------------ */
/* CPU capabilities ("compute capability")                                   */
/* ------------------------------------------------------------------------ */

/* One bit per capability. A bit is set only when the CPU has the feature AND
 * the operating system saves its register state (XCR0, Linux AMX permission,
 * AArch64 hwcaps). Linux grants AMX tile state only on request, which init
 * makes once and only when a backend needing AMX could run: the AMX bits are
 * set where the process held the permission already or init obtained it, and
 * clear where Linux refused it (an AMX backend's reasons then say so). */
typedef enum mla_cap {
    /* x86-64 */
    MLA_CAP_SSE42 = 1u << 0,
    MLA_CAP_AVX2 = 1u << 1,
    MLA_CAP_FMA = 1u << 2,
    MLA_CAP_F16C = 1u << 3,
    MLA_CAP_AVX512F = 1u << 4,
    MLA_CAP_AVX512BW = 1u << 5,
    MLA_CAP_AVX512VL = 1u << 6,
    MLA_CAP_AVX512DQ = 1u << 7,
    MLA_CAP_AVX512_BF16 = 1u << 8,
    MLA_CAP_AVX512_FP16 = 1u << 9,
    MLA_CAP_AMX_TILE = 1u << 10,
    MLA_CAP_AMX_BF16 = 1u << 11,
    MLA_CAP_AMX_FP16 = 1u << 12, /* TDPFP16PS (Granite Rapids)         */
    /* AArch64: Advanced SIMD is spelled "neon" everywhere in libmla (caps,
     * backends, kernel suffixes), and a backend that adds one extension is
     * named after its capability (neon_bf16, neon_fhm) */
    MLA_CAP_NEON = 1u << 16,      /* Advanced SIMD (HWCAP_ASIMD)        */
    MLA_CAP_NEON_FP16 = 1u << 17, /* FP16 arithmetic (FEAT_FP16)        */
    MLA_CAP_NEON_BF16 = 1u << 18, /* BFDOT/BFMMLA/BFCVT (FEAT_BF16)     */
    MLA_CAP_SVE = 1u << 19,
    MLA_CAP_NEON_FHM = 1u << 20,  /* FMLAL/FMLSL (FEAT_FHM)             */
} mla_cap;

typedef uint32_t mla_caps; /* a set of mla_cap bits */

/* Capabilities in use: detected, then masked by MLA_MAX_ISA. */
MLA_API mla_caps mla_cpu_caps(void);

/* Capabilities the CPU reports, before MLA_MAX_ISA masking. */
MLA_API mla_caps mla_cpu_caps_detected(void);

/* Lower-case name of one capability bit ("avx512_bf16"); "?" if not one. */
MLA_API const char *mla_cap_name(mla_cap cap);

/* Writes the names of the set bits, space separated, into buf (always
 * NUL-terminated when size > 0). Returns the length the full text needs. */
MLA_API size_t mla_caps_format(mla_caps caps, char *buf, size_t size);

/* ------------------------------------------------------------------------ */
/* Ops, configurations and backend choice                                     */
/* ------------------------------------------------------------------------ */

/* Groups of operations that choose their backend independently. */
typedef enum mla_op {
    MLA_OP_CONVERT = 0, /* dtype conversions, vector exp, cache ops      */
    MLA_OP_DECODE,      /* absorbed latent-attention decode               */
    MLA_OP_PREFILL,     /* prefill kernels: varlen flash attention,
                           merge_attn_states, the kv_b_proj up-projection */
    MLA_OP_COUNT
} mla_op;

/* "convert", "decode", "prefill". */
MLA_API const char *mla_op_name(mla_op op);

/* What a backend is asked to run. */
typedef struct mla_config {
    mla_dtype q_dtype;
    mla_dtype cache_dtype;
    int64_t kv_lora_rank; /* L, 512 for DeepSeek V2/V3                        */
    int64_t rope_dim;     /* R, 64 for DeepSeek V2/V3                         */
    int64_t num_heads;    /* query heads on this rank                        */
    int64_t block_size;   /* tokens per KV-cache block                       */
    bool bf16_compute;    /* decode's opt-in (mla_decode_args.bf16_compute)   */
} mla_config;

/* The DeepSeek V3 shape: f32 q, bf16 cache, L=512, R=64, 128 heads, block 64. */
MLA_API mla_config mla_config_default(void);

#define MLA_MAX_REASONS 8
#define MLA_REASON_LEN 96

/* Why a backend cannot run an op/config ("cpu lacks avx512f"). */
typedef struct mla_reasons {
    int count;
    char text[MLA_MAX_REASONS][MLA_REASON_LEN];
} mla_reasons;

/* Collects every reason the named backend cannot run `op` with `cfg` on this
 * CPU (cfg may be NULL: only CPU and op support are checked). MLA_OK with
 * out->count == 0 means valid. Unknown name: MLA_ERR_UNKNOWN_BACKEND. */
MLA_API mla_status mla_backend_validate(const char *name, mla_op op, const mla_config *cfg,
                                        mla_reasons *out);

/* Force `op` to use the named backend (NULL: back to auto-selection).
 * Overrides MLA_<OP>_BACKEND. Fails, changing nothing, if the name is unknown
 * (message lists valid names) or the backend cannot run on this CPU
 * (message lists reasons). Not to be called while ops run on other threads. */
MLA_API mla_status mla_force_backend(mla_op op, const char *name);

/* Name of the backend whose kernels ran the calling thread's last successful
 * op ("" before any). */
MLA_API const char *mla_last_backend(void);

/* ------------------------------------------------------------------------ */
/* Initialization and threads                                                */
/* ------------------------------------------------------------------------ */

/* Detects the CPU and reads MLA_MAX_ISA, MLA_CONVERT_BACKEND,
 * MLA_DECODE_BACKEND, MLA_PREFILL_BACKEND, MLA_LOG and MLA_VERBOSE
 * (docs/semantics.md §6; a metadata builder called first reads MLA_VERBOSE
 * itself). Runs once; later calls
 * return the first result. Optional: every entry point initializes. A bad
 * environment variable makes this (and every op) fail with MLA_ERR_BAD_ENV,
 * MLA_ERR_UNKNOWN_BACKEND or MLA_ERR_BACKEND_INVALID and a message. */
MLA_API mla_status mla_init(void);

/* Threads an op uses when the call does not say: omp_get_max_threads().
 * Every op and workspace query that takes `threads` reads it the same way:
 * threads <= 0 means mla_default_threads(), and a count above the largest
 * of mla_default_threads(), omp_get_num_procs() and MLA_THREAD_CAP_MIN runs
 * on that largest. (OpenMP starts every thread a region asks for, and its
 * runtime ends the process when it cannot: INT_MAX, or tens of thousands.
 * Threads beyond the processors only take turns; up to MLA_THREAD_CAP_MIN
 * they run as asked on any machine, for callers and tests that
 * oversubscribe on purpose.) Any int is a valid count, and a workspace query
 * and its op given the same count (and OpenMP settings) agree on the size.
 * An op's threads are an OpenMP parallel region; called from inside the
 * caller's own parallel region it is a nested one, which under OpenMP's
 * default max-active-levels of 1 runs on the calling thread alone (with
 * more levels, a team of its own): either way the results are those of
 * the same call made outside any region (docs/semantics.md §8). */
#define MLA_THREAD_CAP_MIN 64
MLA_API int mla_default_threads(void);

/* A server's own thread pool (ggml-style) can run libmla's parallel loops
 * instead of OpenMP. Every parallel loop of libmla is n tasks, task(i,
 * task_ctx) for i in [0, n); with a pool set, an op hands each loop of two
 * or more tasks to fn (one call a loop, several in order where an op's work
 * has stages), and runs a loop of one task, and every loop of a call that
 * gets one thread, on the calling thread itself.
 *
 * fn must: call task(i, task_ctx) exactly once for every i in [0, n), on
 * any threads it likes, the calling one included, in any order and with any
 * overlap; and return only when every task has returned, with their writes
 * visible to the caller (a mutex or release/acquire handoff, as any pool's
 * wait gives). It should run at most `threads` tasks at once (libmla's
 * thread count for the call, at most n, never more than the call's
 * `threads`): more gain nothing, fewer only take longer.
 *
 * libmla guarantees: the tasks of one call of fn are independent (none
 * waits for another, so running them one after another on one thread is
 * correct), none calls into libmla or into fn, none reads the thread it
 * runs on (scratch is per task), and an op's results are bit for bit those
 * of the same call on OpenMP with the same `threads` (what the tasks are
 * depends on `threads`, never on the pool). fn may be called from several
 * threads at once when the server calls libmla from several threads.
 *
 * Set it once, before other calls (or while no call runs); fn NULL goes back
 * to OpenMP. pool_ctx is handed to every call of fn. `threads` keeps its
 * meaning (threads <= 0 is mla_default_threads(), OpenMP's own default): a
 * server with a pool passes its size. (docs/semantics.md §8.) */
typedef void (*mla_task_fn)(int64_t i, void *task_ctx);
typedef void (*mla_parallel_for_fn)(void *pool_ctx, int64_t n, int threads, mla_task_fn task,
                                    void *task_ctx);
MLA_API void mla_set_parallel_for(mla_parallel_for_fn fn, void *pool_ctx);

/* ------------------------------------------------------------------------ */
/* Element-wise ops (through the MLA_OP_CONVERT backend)                      */
/* ------------------------------------------------------------------------ */

/* dst[i] = convert(src[i]) for i < n, between f32 and any of bf16, f16,
 * fp8_e4m3, fp8_e5m2 (either way), or from fp8_e4m3 or fp8_e5m2 to bf16
 * (rounding as the mla_cvt_*_fn types say).
 * threads <= 0: mla_default_threads(). src and dst must not overlap. n == 0
 * is valid and writes nothing. */
MLA_API mla_status mla_convert(mla_dtype dst_dtype, void *dst, mla_dtype src_dtype, const void *src,
                               int64_t n, int threads);

/* mla_convert with an fp8 scale: f32 -> fp8 stores saturate(x / scale),
 * fp8 -> f32 gives x * scale (fp8 -> bf16: that f32 rounded to bf16). scale
 * must be finite and > 0, and 1 for pairs without an fp8 side. */
MLA_API mla_status mla_convert_scaled(mla_dtype dst_dtype, void *dst, mla_dtype src_dtype,
                                      const void *src, int64_t n, float scale, int threads);

/* dst[i] = e^src[i] (within 1 ulp; e^-inf = 0, e^+inf = inf, NaN stays NaN).
 * dst may equal src. */
MLA_API mla_status mla_exp_f32(float *dst, const float *src, int64_t n, int threads);


/* ------------------------------------------------------------------------ */
/* Metadata builders (§2, §5.3). Pure C, no kernels; caller buffers.        */
/* Every builder validates all input before its first write.                */
/* ------------------------------------------------------------------------ */

/* One request as the scheduler sees it this step. */
typedef struct mla_request {
    int64_t num_computed_tokens;  /* already in the KV cache                     */
    int64_t num_scheduled_tokens; /* new tokens this step (its query length)     */
    int64_t num_prompt_tokens;    /* prompt length; computed < prompt = prefilling */
    const int32_t *block_ids;     /* physical blocks (manager block size), in order */
    int64_t num_block_ids;
} mla_request;

/* How block ids and slots are laid out. A block id b must be >= 0 (else
 * MLA_ERR_OUT_OF_RANGE) and its kernel ids and slots must fit int32 and
 * int64: b*m + m - 1 <= INT32_MAX and (b + 1) * manager_block_size - 1 <=
 * INT64_MAX (else MLA_ERR_OVERFLOW; with m > 2^31 no id fits). */
typedef struct mla_block_layout {
    /* block size of mla_request.block_ids; 0: kernel_block_size           */
    int64_t manager_block_size;
    /* divides manager_block_size; id b expands to b*m .. b*m+m-1 with
     * m = manager / kernel; 0: manager_block_size (m = 1). One of the
     * two block sizes must be given.                                       */
    int64_t kernel_block_size;
    int64_t max_blocks_per_req; /* block_table columns, in kernel blocks          */
    /* decode context parallelism (§2.3); 0 in all three (a zero-initialised
     * struct) means none: world_size 1, rank 0, interleave 1, and 0 in
     * world_size or interleave alone means 1. With it the interleave must
     * divide kernel_block_size. seq_lens stay global. */
    int64_t cp_world_size, cp_rank, cp_interleave;
} mla_block_layout;

/* Per-step common metadata (§2.1), written into caller buffers. */
typedef struct mla_batch_metadata {
    int32_t *query_start_loc; /* [B+1]                                           */
    int32_t *seq_lens;        /* [B]: computed + scheduled                       */
    int64_t *positions;       /* [T]                                             */
    int64_t *slot_mapping;    /* [slot_mapping_len]: T slots, then -1 padding    */
    int64_t slot_mapping_len; /* >= T (vLLM pads to max_num_batched_tokens)      */
    int32_t *block_table;     /* [B, max_blocks_per_req]; unused entries 0       */
    /* outputs */
    int64_t num_actual_tokens; /* T */
    int64_t max_query_len, max_seq_len;
} mla_batch_metadata;

/* Builds query_start_loc, seq_lens, positions, slot_mapping, block_table and
 * the maxima for B requests. */
MLA_API mla_status mla_build_batch_metadata(const mla_request *reqs, int64_t num_reqs,
                                            const mla_block_layout *layout, mla_batch_metadata *md);

/* vLLM's update_block_table for a second KV-cache group: rewrites only
 * md->block_table and md->slot_mapping (all slot_mapping_len entries) from
 * new block ids, reading (and checking) query_start_loc and positions already
 * in md; seq_lens, positions and the scalars are left alone. */
MLA_API mla_status mla_update_block_table(const mla_request *reqs, int64_t num_reqs,
                                          const mla_block_layout *layout, mla_batch_metadata *md);

/* The incremental forms, for a server that keeps one block table of
 * max_blocks_per_req columns (and any number of rows) from step to step
 * (§2.2): row r serves reqs[r], and the call writes only what changed.
 * row_ids [B] (in/out): in, how many ids row r holds, which means its
 * entries past row_ids[r] * m (m = manager / kernel block size) are 0, as
 * in a dense table and a zeroed one; out, reqs[r].num_block_ids. first_new
 * [B] (NULL: min(row_ids[r], num_block_ids) each) is the first of reqs[r]'s
 * ids the row lacks: the ids before it are in the row already; 0 for a row
 * now serving another request (a new one, a reorder). The call writes ids
 * first_new[r] .. num_block_ids - 1 and zeroes the row's entries past them
 * up to row_ids[r] * m, leaving the row as the dense builder writes it.
 * Checks as the dense forms do (row_ids[r] * m <= max_blocks_per_req and
 * first_new[r] in [0, min(row_ids[r], num_block_ids)], else
 * MLA_ERR_OUT_OF_RANGE), except that of the block ids only those it writes
 * and those holding this step's positions are read, the ones kept having
 * been checked when they were written: a step costs O(B + T + new ids),
 * not O(B * max_blocks_per_req).
 *
 * mla_build_batch_metadata_append: mla_build_batch_metadata into md, with
 * md->block_table the persistent table. */
MLA_API mla_status mla_build_batch_metadata_append(const mla_request *reqs, int64_t num_reqs,
                                                   const mla_block_layout *layout,
                                                   const int64_t *first_new, int64_t *row_ids,
                                                   mla_batch_metadata *md);

/* The block table alone, as mla_build_batch_metadata_append writes it. */
MLA_API mla_status mla_append_block_table(const mla_request *reqs, int64_t num_reqs,
                                          const mla_block_layout *layout, const int64_t *first_new,
                                          int64_t *row_ids, int32_t *block_table);

typedef enum mla_region {
    MLA_REGION_DECODE = 0,   /* context, scheduled <= tau, done prefilling  */
    MLA_REGION_SHORT_EXTEND, /* context, scheduled <= tau, still prefilling */
    MLA_REGION_LONG_EXTEND,  /* context, scheduled > tau                    */
    MLA_REGION_PREFILL,      /* no context                                  */
    MLA_REGION_COUNT
} mla_region;

/* Orders the batch decode -> short_extend -> long_extend -> prefill with the
 * fewest moves (requests already in their region stay). new_order[i] = old
 * index of the request that goes to position i; region_counts[4] optional. */
MLA_API mla_status mla_reorder_batch(const mla_request *reqs, int64_t num_reqs, int64_t threshold,
                                     int32_t *new_order, int64_t *region_counts);

typedef struct mla_batch_split {
    int64_t num_decodes, num_prefills, num_decode_tokens, num_prefill_tokens;
} mla_batch_split;

/* split_decodes_and_prefills (§2.4) over query_start_loc [B+1]. */
MLA_API mla_status mla_split_batch(const int32_t *query_start_loc, int64_t num_reqs,
                                   int64_t threshold, bool require_uniform, mla_batch_split *out);

/* Chunked-prefill workspace rows W (§2.6): min(max(8*max_model_len,
 * 4*max_num_seqs*block_size), cap) then at least max_num_seqs*block_size.
 * cap <= 0 means vLLM's 65536. */
MLA_API mla_status mla_chunk_workspace_tokens(int64_t max_model_len, int64_t max_num_seqs,
                                              int64_t block_size, int64_t cap, int64_t *tokens);

/* Bytes and alignment of a caller-owned workspace of [tokens, width] dtype. */
MLA_API mla_status mla_chunk_workspace_bytes(int64_t tokens, int64_t width, mla_dtype dtype,
                                             int64_t *bytes, int64_t *alignment);

/* A context-chunk plan for the prefills of a step (§2.6). */
typedef struct mla_chunk_plan mla_chunk_plan;

/* What a plan holds. Arrays are owned by the plan. */
typedef struct mla_chunk_plan_info {
    int64_t num_prefills;    /* P                                              */
    int64_t num_with_context; /* n_ctx                                         */
    int64_t max_context_len; /* C_max                                          */
    int64_t max_chunk_len;   /* M (a multiple of the block size)              */
    int64_t num_chunks;
    const int32_t *starts;         /* [num_chunks, P]                          */
    const int32_t *chunk_seq_lens; /* [num_chunks, P]                          */
    const int32_t *cu_seq_lens;    /* [num_chunks, P+1]                        */
    const int32_t *seq_tot;        /* [num_chunks]                             */
    const int32_t *max_seq_lens;   /* [num_chunks]                             */
    const int32_t *token_to_seq;   /* [num_chunks, token_to_seq_stride]        */
    int64_t token_to_seq_stride;   /* max over chunks of seq_tot               */
    int64_t prefill_tokens_with_context; /* qsl_p[n_ctx]                       */
    void *workspace;               /* [W, width] when the plan owns one, else NULL */
    int64_t workspace_tokens;      /* W                                        */
    int64_t workspace_width;       /* its row width (0: no workspace)          */
    mla_dtype workspace_dtype;     /* its dtype                                */
} mla_chunk_plan_info;

/* Plans the context chunks for P prefills (with-context ones first, as the
 * reorder leaves them): context_lens [P], prefill query_start_loc [P+1]
 * (starting at 0), workspace_tokens W, kernel block size. With
 * workspace_width > 0 the plan also owns a 64-byte aligned [W, width]
 * workspace of workspace_dtype. A plan with no context has 0 chunks. */
MLA_API mla_status mla_chunk_plan_create(const int32_t *context_lens, const int32_t *query_start_loc,
                                         int64_t num_prefills, int64_t workspace_tokens,
                                         int64_t block_size, int64_t workspace_width,
                                         mla_dtype workspace_dtype, mla_chunk_plan **plan);

/* mla_chunk_plan_create without token_to_seq, which at long contexts is
 * most of a plan (num_chunks x stride int32s, megabytes): info.token_to_seq
 * is NULL, token_to_seq_stride still the longest row. A server writes each
 * chunk's row with mla_chunk_token_to_seq when it gathers that chunk. */
MLA_API mla_status mla_chunk_plan_create_lean(const int32_t *context_lens,
                                              const int32_t *query_start_loc, int64_t num_prefills,
                                              int64_t workspace_tokens, int64_t block_size,
                                              int64_t workspace_width, mla_dtype workspace_dtype,
                                              mla_chunk_plan **plan);
MLA_API void mla_chunk_plan_info_get(const mla_chunk_plan *plan, mla_chunk_plan_info *info);
MLA_API void mla_chunk_plan_destroy(mla_chunk_plan *plan);

/* Row `chunk` of a plan's token_to_seq (lean or not) into out [out_len]:
 * each prefill's index r repeated chunk_seq_lens[chunk][r] times, in order,
 * then zeros; with out_len = token_to_seq_stride, the plan's row exactly.
 * chunk in [0, num_chunks) (else MLA_ERR_OUT_OF_RANGE); out_len >=
 * seq_tot[chunk] (else MLA_ERR_CAPACITY). Hand out and seq_tot[chunk] to
 * mla_gather_cache. */
MLA_API mla_status mla_chunk_token_to_seq(const mla_chunk_plan *plan, int64_t chunk, int32_t *out,
                                          int64_t out_len);

/* One part of a split-KV decode schedule (FlashMLA's field order). Blocks are
 * in units of block_n tokens. The part covers requests begin_req..end_req
 * (inclusive), from begin_block of the first to end_block (exclusive) of the
 * last. An idle part has begin_req == num_reqs (skip it). */
typedef struct mla_sched_part {
    int32_t begin_req, end_req, begin_block, end_block;
    int32_t begin_split, first_partial, last_partial, pad;
} mla_sched_part;

/* A zero-initialised struct means every default, as does NULL wherever one
 * is taken: one part per thread, blocks of 16 tokens, a segment costing 2
 * blocks (finer than FlashMLA's 64 + 5, for balance across CPU threads;
 * {.block_n = 64, .overhead = 5} gives FlashMLA's cut points), no
 * batch-invariant splits. */
#define MLA_SCHED_NO_OVERHEAD (-1) /* overhead 0 (a zero field is the default) */

typedef struct mla_decode_sched_params {
    /* work parts, usually the thread count; <= 0: mla_decode's thread
     * count, or omp_get_max_threads() for mla_build_decode_sched; at most
     * 2^20 (else MLA_ERR_INVALID_ARGUMENT) */
    int64_t num_parts;
    int64_t block_n;    /* KV tokens per unit of work; <= 0: 16              */
    /* fixed cost per request segment, in blocks: > 0 as given, 0: 2,
     * MLA_SCHED_NO_OVERHEAD: 0, any other negative value is
     * MLA_ERR_INVALID_ARGUMENT; at most INT32_MAX (else MLA_ERR_OVERFLOW) */
    int64_t overhead;
    /* > 0: batch-invariant mode. Every request is cut every split_blocks
     * blocks from its start, whatever the batch or thread count, and parts
     * take whole splits; a driver cuts a part's range of a request at
     * multiples of split_blocks (split k -> slot split_prefix[b] + k). */
    int64_t split_blocks;
} mla_decode_sched_params;

/* Builds the schedule for B requests with seq_lens [B] (params NULL or
 * zeroed: all defaults, the schedule mla_decode runs on num_parts threads
 * when its args give no schedule): parts [num_parts]
 * (the resolved count is returned in *num_parts), split_prefix [B+1]
 * (request b owns partial slots split_prefix[b] .. split_prefix[b+1]-1; the
 * last entry is the partial-buffer row count, at most B + num_parts in the
 * default mode). parts must hold max(1, num_parts) entries. B, and the slot
 * count (B + num_parts - 1 in the default mode), must fit int32. */
MLA_API mla_status mla_build_decode_sched(const int32_t *seq_lens, int64_t num_reqs,
                                          const mla_decode_sched_params *params, mla_sched_part *parts,
                                          int64_t parts_capacity, int64_t *num_parts,
                                          int32_t *split_prefix);

/* KV cache queries a server needs before it allocates (vLLM
 * get_kv_cache_shape): shape [num_blocks, block_size, width] and its bytes and
 * alignment for a dtype. */
MLA_API mla_status mla_kv_cache_shape(int64_t num_blocks, int64_t block_size, int64_t width,
                                      mla_dtype dtype, int64_t shape[3], int64_t *bytes,
                                      int64_t *alignment);

/* ------------------------------------------------------------------------ */
/* Paged latent KV cache ops (§3), through the MLA_OP_CONVERT backend       */
/* ------------------------------------------------------------------------ */

/* One layer's paged cache [num_blocks, block_size, width]: row (blk, off)
 * starts at element blk * block_stride + off * entry_stride of data (strides
 * in elements; 0 means dense: entry_stride = width, block_stride =
 * block_size * entry_stride). Rows must not overlap: entry_stride >= width
 * and, with more than one block, block_stride >= block_size * entry_stride. */
typedef struct mla_kv_cache {
    void *data;
    mla_dtype dtype;
    int64_t num_blocks, block_size, width;
    int64_t block_stride, entry_stride;
    float scale; /* fp8 caches: stored = saturate(x / scale); read back x * scale.
                    Finite and > 0; ignored for other dtypes. */
} mla_kv_cache;

/* concat_and_cache_mla (§3.1): for t < num_tokens with
 * slot = slot_mapping[t] >= 0, row (slot / block_size, slot % block_size) of
 * the cache = [kv_c[t, 0:L], k_pe[t, 0:R]] converted to the cache dtype
 * (fp8: with the cache's scale). kv_c and k_pe have src_dtype (f32, bf16 or
 * f16) and row strides in elements; L + R must equal the cache width
 * (k_pe may be NULL when R = 0). Negative slots are skipped (padding); a slot
 * at or past num_blocks * block_size fails before anything is written. Slots
 * must be distinct (a row written twice in one call holds an unspecified mix).
 * threads <= 0: mla_default_threads(). */
MLA_API mla_status mla_concat_and_cache(const mla_kv_cache *cache, const void *kv_c,
                                        int64_t kv_c_stride, const void *k_pe, int64_t k_pe_stride,
                                        mla_dtype src_dtype, int64_t kv_lora_rank, int64_t rope_dim,
                                        const int64_t *slot_mapping, int64_t num_tokens,
                                        int threads);

/* Paged rows of requests -> contiguous workspace rows. block_table is
 * [num_reqs, block_table_cols] int32 (row stride block_table_cols);
 * cu_seq_lens [num_reqs + 1] gives each request's rows of dst; seq_starts
 * [num_reqs] (NULL: all 0) is the position of a request's first row. */
typedef struct mla_gather_spec {
    const int32_t *block_table;
    int64_t block_table_cols;
    int64_t num_reqs;
    const int32_t *cu_seq_lens;
    const int32_t *seq_starts;
} mla_gather_spec;

/* gather_and_maybe_dequant_cache (§3.2): for each dst row
 * t < num_tokens, r = token_to_seq[t]; rows with t >= cu_seq_lens[r+1] are
 * skipped (left as they are); else pos = t - cu_seq_lens[r] + seq_starts[r]
 * and dst[t] = cache row (block_table[r][pos / bs], pos % bs) converted to
 * dst_dtype (f32, bf16 or f16; fp8 caches are multiplied by their scale).
 * dst rows hold the cache width, row stride dst_stride elements. Every index
 * is checked before the first write (r in range, t >= cu_seq_lens[r], block
 * column and block id in range). */
MLA_API mla_status mla_gather_cache(const mla_kv_cache *cache, const mla_gather_spec *spec,
                                    const int32_t *token_to_seq, int64_t num_tokens, void *dst,
                                    mla_dtype dst_dtype, int64_t dst_stride, int threads);

/* cp_gather_cache (§3.3): rows cu_seq_lens[b] .. cu_seq_lens[b+1]-1 of
 * dst get positions seq_starts[b] + 0, 1, ... of request b, copied byte for
 * byte (dst has the cache dtype; row stride dst_stride elements).
 * cu_seq_lens must be non-decreasing from cu_seq_lens[0] >= 0. */
MLA_API mla_status mla_cp_gather_cache(const mla_kv_cache *cache, const mla_gather_spec *spec,
                                       void *dst, int64_t dst_stride, int threads);

/* ------------------------------------------------------------------------ */
/* Absorbed MLA decode (§1.3, §1.6, §5), through the MLA_OP_DECODE           */
/* backend                                                                    */
/* ------------------------------------------------------------------------ */

/* Latent attention of B requests, s_q query tokens each (token t = b*s_q + i),
 * H heads, over a paged cache of width L + R. Query element (t, h, d) is
 * q_nope[t*q_nope_token_stride + h*q_nope_head_stride + d] for d < L and
 * q_pe[t*q_pe_token_stride + h*q_pe_head_stride + d - L] for d >= L (both in
 * q_dtype; strides in elements). For one concatenated q [B, s_q, H, L+R] pass
 * q_pe = q + L with q's strides; vLLM's absorbed ql_nope (a transposed bmm
 * output) has head stride Td*L and token stride L. V is the first L values
 * of each cache row. */
typedef struct mla_decode_args {
    int64_t num_reqs;     /* B >= 0                                         */
    int64_t s_q;          /* query tokens per request, >= 1 (MTP: causal)   */
    int64_t num_heads;    /* H >= 1                                         */
    int64_t kv_lora_rank; /* L >= 1                                         */
    int64_t rope_dim;     /* R >= 0; L + R = cache width                    */
    float scale;          /* softmax scale on q.k (§1.4), finite            */
    mla_dtype q_dtype;    /* f32, bf16 or f16; out has it too               */
    const void *q_nope;
    int64_t q_nope_token_stride, q_nope_head_stride;
    const void *q_pe;     /* may be NULL when R = 0                         */
    int64_t q_pe_token_stride, q_pe_head_stride;
    const mla_kv_cache *cache;   /* any dtype; fp8 uses its scale            */
    const int32_t *block_table;  /* [B, block_table_cols]                   */
    int64_t block_table_cols;
    const int32_t *seq_lens;     /* [B]: tokens in the cache, this step's included */
    /* out (t, h, l) at out[t*out_token_stride + h*out_head_stride + l].
     * out and lse must not overlap q_nope, q_pe, the cache, the block table,
     * seq_lens or each other: the call reads query rows after it has written
     * the out rows of others (not checked). */
    void *out;
    int64_t out_token_stride, out_head_stride;
    float *lse;                  /* [B, H, s_q] natural log, or NULL           */
    /* Split-KV schedule (mla_build_decode_sched) the call builds for itself;
     * NULL or zeroed: the defaults, one part per thread (see
     * mla_decode_sched_params). split_blocks > 0 gives batch-invariant
     * results: bit-identical for every thread count and batch composition
     * with the same split_blocks and block_n. */
    const mla_decode_sched_params *sched;
    /* f32 q: run the attention GEMMs in bf16 where the backend has a bf16
     * tile route (avx512_amx): q and any non-bf16 cache rows are rounded to
     * bf16 (fp8 dequantised), P too, with f32 accumulation and softmax; the
     * results are within bf16 tolerance rather than f32's. Default false:
     * f32 q keeps the f32 route. Ignored for bf16 and f16 q. */
    bool bf16_compute;
} mla_decode_args;

/* Query i of request b sees cache rows j <= seq_lens[b] - s_q + i (causal,
 * aligned to the end); a query that sees no row gets out 0 and lse -inf.
 * Rows a query may not see take no part in its result, so an inf or NaN
 * there reaches only the queries that see it; inf and NaN in what a query
 * sees go through the plain arithmetic (docs/semantics.md §8).
 * Rows past ceil(seq_len / block_size) blocks of the block table are never
 * read (ceil taken without overflow, for any block size). Every block id
 * that will be read, every size and pointer and the schedule (sched, as
 * mla_build_decode_sched checks it) are checked before anything is written,
 * the workspace included. Scratch comes from the caller:
 * mla_decode_workspace_size gives the bytes a call with these args and
 * thread count needs (64-byte alignment best; any works). It reads shapes
 * only: num_reqs, s_q, num_heads, kv_lora_rank, rope_dim, q_dtype and
 * sched, and seq_lens in batch-invariant mode alone (sched->split_blocks
 * > 0, where every split of every request has its partial rows, so the
 * size grows with the lengths); every pointer but those may be NULL and
 * every stride anything, and MLA_ERR_OVERFLOW is returned for sizes past
 * int64. The call checks the rest. A server that sizes once for its
 * lifetime asks mla_decode_workspace_bound instead.
 * threads <= 0: mla_default_threads() (and any count, as it says). */
MLA_API mla_status mla_decode_workspace_size(const mla_decode_args *args, int threads,
                                             int64_t *bytes);
MLA_API mla_status mla_decode(const mla_decode_args *args, void *workspace,
                              int64_t workspace_bytes, int threads);

/* Weight preparation (§1.3): kv_b_proj [H*(P+V), L] (row-major, its
 * dtype f32, bf16 or f16) -> w_uk_t [H, P, L] with w_uk_t[h][p][l] =
 * kv_b_proj[h*(P+V) + p][l], and w_uv [H, L, V] with w_uv[h][l][v] =
 * kv_b_proj[h*(P+V) + P + v][l], both dense in w_dtype (f32 or bf16). */
MLA_API mla_status mla_prepare_weights(const void *kv_b_proj, mla_dtype src_dtype,
                                       int64_t num_heads, int64_t kv_lora_rank,
                                       int64_t qk_nope_dim, int64_t v_head_dim, void *w_uk_t,
                                       void *w_uv, mla_dtype w_dtype, int threads);

/* The absorbed decode forward (§1.6) for Td = B*s_q tokens:
 * ql_nope[t,h] = q_nope[t,h] . W_UK_T[h]; latent attention of (ql_nope,
 * q_pe) over the cache, as mla_decode with the same fields; out[t, h*V + v]
 * = o_lat[t,h] . W_UV[h]. q (t, h, d) for d < P + R is
 * q[t*q_token_stride + h*q_head_stride + d] in dtype, which out has too.
 * The batched GEMMs run on libmla's own kernels with f32 accumulation; as
 * in vLLM, ql_nope and o_lat are kept in the workspace in q's dtype. */
typedef struct mla_decode_forward_args {
    int64_t num_reqs;     /* B >= 0                                         */
    int64_t s_q;          /* query tokens per request, >= 1 (MTP: causal)   */
    int64_t num_heads;    /* H >= 1                                         */
    int64_t kv_lora_rank; /* L >= 1                                         */
    int64_t rope_dim;     /* R >= 0; L + R = cache width                    */
    int64_t qk_nope_dim;  /* P >= 1                                         */
    int64_t v_head_dim;   /* V >= 1                                         */
    float scale;          /* softmax scale on q.k (§1.4), finite            */
    mla_dtype dtype;      /* of q and out: f32, bf16 or f16                 */
    const void *q;        /* [Td, H, P + R]: q_nope then q_pe               */
    int64_t q_token_stride, q_head_stride;
    const void *w_uk_t, *w_uv; /* from mla_prepare_weights                  */
    mla_dtype w_dtype;         /* f32 or bf16                               */
    void *out;                 /* [Td, H*V], head stride V; must not overlap
                                  q, the weights or the cache (not checked) */
    int64_t out_token_stride;
    float *lse;                  /* [B, H, s_q] natural log, or NULL         */
    const mla_kv_cache *cache;   /* any dtype; fp8 uses its scale            */
    const int32_t *block_table;  /* [B, block_table_cols]                   */
    int64_t block_table_cols;
    const int32_t *seq_lens;     /* [B]: tokens in the cache, this step's included */
    const mla_decode_sched_params *sched; /* as mla_decode_args.sched       */
    bool bf16_compute;                    /* as mla_decode_args.bf16_compute */
} mla_decode_forward_args;

/* Reads shapes only, as mla_decode_workspace_size does: the sizes, dtype,
 * w_dtype and sched (seq_lens in batch-invariant mode alone). */
MLA_API mla_status mla_decode_forward_workspace_size(const mla_decode_forward_args *args,
                                                     int threads, int64_t *bytes);
MLA_API mla_status mla_decode_forward(const mla_decode_forward_args *args, void *workspace,
                                      int64_t workspace_bytes, int threads);

/* A server's limits, for one workspace allocated once for its lifetime. */
typedef struct mla_decode_limits {
    int64_t max_reqs;     /* decode requests in a call, >= 0                 */
    int64_t max_s_q;      /* query tokens per request, >= 1                  */
    int64_t max_seq_len;  /* seq_lens entries, >= 0 (read in batch-invariant
                             mode only: max_model_len will do)             */
    int64_t num_heads, kv_lora_rank, rope_dim; /* H, L, R as in the calls   */
    /* P and V of mla_decode_forward, or both 0 when only mla_decode runs */
    int64_t qk_nope_dim, v_head_dim;
    mla_dtype q_dtype;    /* mla_decode's q_dtype, the forward's dtype       */
    int max_threads;      /* <= 0: mla_default_threads() now                 */
    const mla_decode_sched_params *sched; /* the calls' sched (NULL: none)  */
} mla_decode_limits;

/* Bytes of workspace that suffice for every mla_decode (and, with P and V,
 * mla_decode_forward) call within lim: num_reqs <= max_reqs, s_q <=
 * max_s_q, every seq_lens entry <= max_seq_len, the same heads, L, R,
 * q dtype and sched (in batch-invariant mode the same block_n and
 * split_blocks, and num_parts no greater), and threads resolving to at
 * most max_threads' count (see mla_default_threads; threads <= 0 counts as
 * mla_default_threads()): *bytes >= what mla_decode_workspace_size and
 * mla_decode_forward_workspace_size give for any such call. The
 * default schedule's workspace does not depend on the lengths; a
 * batch-invariant one grows with them (a partial row per split). */
MLA_API mla_status mla_decode_workspace_bound(const mla_decode_limits *lim, int64_t *bytes);

/* ------------------------------------------------------------------------ */
/* Prefill kernels (§1.7, §4), through the MLA_OP_PREFILL backend            */
/* ------------------------------------------------------------------------ */

/* Variable-length flash attention forward (§1.7 steps 2 and 4): request b
 * has queries [cu_seqlens_q[b], cu_seqlens_q[b+1]) and keys
 * [cu_seqlens_k[b], cu_seqlens_k[b+1]); every head attends over its own k
 * and v. Element (t, h, d) of q is q[t*q_token_stride + h*q_head_stride + d]
 * (likewise k, v, out). k is whole ([S, H, qk_dim]) when rope_dim is 0;
 * with rope_dim R > 0 it is k_nope [S, H, qk_dim - R] in `k` plus one k_pe
 * [S, R] row per key, shared by every head (MLA's layout, never
 * materialised): k(s, h) = [k_nope(s, h) | k_pe(s)]. Causal masks are
 * bottom-right aligned: query i of a request with n_q queries and n_k keys
 * sees keys j <= n_k - n_q + i; the keys it may not see take no part in
 * its result, so an inf or NaN there reaches only the queries that see it.
 * Out gets the softmax(scale * q.k)-weighted sum of v in the inputs' dtype;
 * lse, if not NULL, [H, T] f32 natural log (lse[h*T + t]), -inf (and out 0)
 * for a row that sees no key. inf and NaN in what a row sees go through
 * the plain arithmetic (docs/semantics.md §8). The result does not depend
 * on the thread count. */
#define MLA_FLASH_ATTN_MAX_DIM 256

typedef struct mla_flash_attn_args {
    int64_t num_seqs;  /* requests B >= 0                                  */
    int64_t num_heads; /* H >= 1                                            */
    int64_t qk_dim;    /* Dqk, 1 .. MLA_FLASH_ATTN_MAX_DIM (P + R for MLA)   */
    int64_t v_dim;     /* Dv, 1 .. MLA_FLASH_ATTN_MAX_DIM                    */
    int64_t rope_dim;  /* R, 0 .. qk_dim - 1: the shared k_pe's width       */
    bool causal;
    float scale;       /* softmax scale on q.k, finite (§1.4)               */
    mla_dtype dtype;   /* of q, k, k_pe, v and out: f32, bf16 or f16        */
    int64_t total_q, total_k;    /* T and S (T within int32)               */
    const int32_t *cu_seqlens_q; /* [B+1]: 0, non-decreasing, last T        */
    const int32_t *cu_seqlens_k; /* [B+1]: 0, non-decreasing, last S        */
    const void *q;
    int64_t q_token_stride, q_head_stride;
    const void *k;               /* k, or k_nope when rope_dim > 0           */
    int64_t k_token_stride, k_head_stride;
    const void *k_pe;            /* [S, R] rows when rope_dim > 0, else unused */
    int64_t k_pe_token_stride;
    const void *v;
    int64_t v_token_stride, v_head_stride;
    void *out;                   /* rows must not overlap each other or inputs */
    int64_t out_token_stride, out_head_stride;
    float *lse;                  /* [H, T] or NULL                          */
} mla_flash_attn_args;

/* Bytes of workspace mla_flash_attn_varlen needs with these shapes and
 * threads (only the sizes, dims and dtype of args are read; no pointer). */
MLA_API mla_status mla_flash_attn_varlen_workspace_size(const mla_flash_attn_args *args,
                                                        int threads, int64_t *bytes);
MLA_API mla_status mla_flash_attn_varlen(const mla_flash_attn_args *args, void *workspace,
                                         int64_t workspace_bytes, int threads);

/* merge_attn_states (§4): merges two partial attention results of the same
 * rows by their LSEs. prefix and suffix are [T, H, head_dim] with the same
 * strides, their LSEs [H, T] (lse[h*T + t]); out may have its own strides.
 * Rows t >= prefill_tokens_with_context take the suffix (and its LSE)
 * unchanged. An LSE of +inf or -inf marks an empty partial; two empty ones
 * give 0 and -inf; a NaN LSE propagates to the row's output and LSE.
 * Weights and the sum are computed in f32; out has the inputs' dtype. */
#define MLA_MERGE_ALL_TOKENS (-1)

typedef struct mla_merge_attn_args {
    int64_t num_tokens; /* T >= 0                                           */
    int64_t num_heads;  /* H >= 1                                           */
    int64_t head_dim;   /* Dh >= 1                                          */
    mla_dtype dtype;    /* of prefix, suffix and out: f32, bf16 or f16      */
    const void *prefix, *suffix;
    int64_t token_stride, head_stride;          /* of prefix and suffix     */
    const float *prefix_lse, *suffix_lse;       /* [H, T]                   */
    void *out;          /* may be prefix or suffix itself (same strides)    */
    int64_t out_token_stride, out_head_stride;
    float *out_lse;     /* [H, T] or NULL                                   */
    /* K, 0 .. T; MLA_MERGE_ALL_TOKENS: T */
    int64_t prefill_tokens_with_context;
} mla_merge_attn_args;

MLA_API mla_status mla_merge_attn_states(const mla_merge_attn_args *args, int threads);

/* The kv_b_proj up-projection (§1.7 step 1) on libmla's packed GEMM:
 * for each token s and head h, with W = kv_b_proj [H*(P+V), L] (row-major,
 * as nn.Linear stores it),
 *   k_nope(s, h, p) = sum_l kv_c(s, l) * W[h*(P+V) + p][l]
 *   v(s, h, e)      = sum_l kv_c(s, l) * W[h*(P+V) + P + e][l]
 * written straight into the per-head layouts the attention reads. kv_c and
 * W are f32 or bf16 (f16 too); products accumulate in f32, rounded once to
 * out_dtype. On the f32 route each output is one chain of f32 fused
 * multiply-adds in l order, so every backend gives the same bits; a bf16
 * dot-product route (when kv_c and W are bf16 and the backend's route timed
 * faster at init) gives its instruction's arithmetic.
 * Memory: k_nope and v may share one buffer only as interleaved rows (the
 * same strides, each (token, head) cell holding one's row before the
 * other's, as in [S, H, P + V]); neither may overlap kv_c or kv_b_proj.
 * kv_b_proj (or kv_b_proj_packed) is required; kv_c, k_nope and v may be
 * NULL when they have no element (S = 0, or L = 0 for kv_c). The workspace
 * holds the operands packed (about (S + H(P+V)) * L * 4 bytes, S * L * 4
 * with kv_b_proj_packed): size it with mla_up_proj_workspace_size, which
 * reads shapes, dtypes and whether kv_b_proj_packed is set only. */
typedef struct mla_up_proj_args {
    int64_t num_tokens;   /* S >= 0                                          */
    int64_t num_heads;    /* H >= 1                                          */
    int64_t kv_lora_rank; /* L >= 0 (0: outputs are 0)                       */
    int64_t qk_nope_dim;  /* P >= 1                                          */
    int64_t v_head_dim;   /* V >= 1                                          */
    const void *kv_c;     /* [S, L] rows                                     */
    mla_dtype kv_c_dtype;
    int64_t kv_c_stride;
    const void *kv_b_proj; /* [H*(P+V), L] dense                             */
    mla_dtype w_dtype;
    mla_dtype out_dtype;  /* of k_nope and v: f32, bf16 or f16              */
    void *k_nope;
    int64_t k_nope_token_stride, k_nope_head_stride;
    void *v;
    int64_t v_token_stride, v_head_stride;
    /* kv_b_proj packed once by mla_pack_kv_b_proj, or NULL: when set, it
     * is read instead of kv_b_proj (which may then be NULL) */
    const void *kv_b_proj_packed;
} mla_up_proj_args;

MLA_API mla_status mla_up_proj_workspace_size(const mla_up_proj_args *args, int threads,
                                              int64_t *bytes);
MLA_API mla_status mla_up_proj(const mla_up_proj_args *args, void *workspace,
                               int64_t workspace_bytes, int threads);

/* kv_b_proj packed once (per layer, at load) as the up-projection's GEMM
 * reads it, so that mla_up_proj and mla_prefill skip packing it on every
 * call and every context chunk. Reads num_heads, kv_lora_rank,
 * qk_nope_dim, v_head_dim, kv_b_proj, w_dtype and kv_c_dtype (the dtype of
 * the latent rows it will multiply) of args. It is packed for the route
 * the backend MLA_OP_PREFILL selects now for that pair of dtypes: f32 (4
 * bytes an element, whatever w_dtype), or bf16 pairs (2 bytes) on a bf16
 * dot-product route. Calls give the same bits as with kv_b_proj itself.
 * The buffer records the shape, dtypes and route it was packed for, and
 * calls reject one that does not match (or a bf16-pair packing on a
 * backend without that route); it holds no pointer, so it may be copied,
 * saved or mapped anywhere (64-byte alignment reads fastest).
 * mla_pack_kv_b_proj_size reads shapes and dtypes only. */
MLA_API mla_status mla_pack_kv_b_proj_size(const mla_up_proj_args *args, int64_t *bytes);
MLA_API mla_status mla_pack_kv_b_proj(const mla_up_proj_args *args, void *packed, int64_t bytes,
                                      int threads);

/* ------------------------------------------------------------------------ */
/* The prefill op (§1.7): the prefill part of a step                          */
/* ------------------------------------------------------------------------ */

/* How a prefill request is computed. MHA: up-project the latent of its new
 * tokens and of its cached context (gathered chunk by chunk through the
 * plan's workspace) and run flash attention, the chunks and the new tokens
 * merged by LSE. ABSORBED: attend in latent space over the paged cache (the
 * decode kernel with s_q = the new tokens, causal), then W_UV; no gather and
 * no up-projection, so it costs far less for a short extend of a long
 * context. AUTO picks per request from a cost model of this CPU
 * (mla_prefill_choose_path). */
typedef enum mla_prefill_path {
    MLA_PREFILL_PATH_AUTO = 0,
    MLA_PREFILL_PATH_MHA,
    MLA_PREFILL_PATH_ABSORBED,
} mla_prefill_path;

/* The prefill requests of a step (after mla_reorder_batch: those with cached
 * context first). Request r has new tokens [query_start_loc[r],
 * query_start_loc[r+1]) of T = num_tokens and context_lens[r] tokens already
 * cached before them; the cache must already hold the new tokens too (written
 * by mla_concat_and_cache first, as vLLM does), at positions context_lens[r]
 * onwards of the request's block table row. Token t sees its request's
 * context and its new tokens up to itself (causal). Element (t, h, d) of q
 * is q[t*q_token_stride + h*q_head_stride + d], d < P + R (q_nope then
 * q_pe); kv_c [T, L] and k_pe [T, R] are the new tokens' latent rows as
 * written to the cache. out[t*out_token_stride + h*V + v] gets the result
 * in dtype. A request's length, context_lens[r] + its new tokens, must fit
 * int32 (as vLLM's seq_lens; else MLA_ERR_OVERFLOW). */
typedef struct mla_prefill_args {
    int64_t num_prefills;  /* requests >= 0                                  */
    int64_t num_tokens;    /* T, the new tokens of all of them               */
    int64_t num_heads;     /* H >= 1                                         */
    int64_t kv_lora_rank;  /* L >= 1                                         */
    int64_t rope_dim;      /* R >= 0; L + R = cache width                    */
    int64_t qk_nope_dim;   /* P >= 1; P + R <= MLA_FLASH_ATTN_MAX_DIM        */
    int64_t v_head_dim;    /* V, 1 .. MLA_FLASH_ATTN_MAX_DIM                 */
    float scale;           /* softmax scale on q.k, finite (§1.4)            */
    mla_dtype dtype;       /* of q, kv_c, k_pe and out: f32, bf16 or f16     */
    const int32_t *query_start_loc; /* [num_prefills + 1], from 0 to T      */
    const int32_t *context_lens;    /* [num_prefills], with-context first   */
    /* mla_chunk_plan_create (or _lean) for context_lens, query_start_loc;
     * NULL when no request has context or every request takes the absorbed
     * path. The context chunks are gathered into context_workspace, the
     * caller's [W, L + R] rows in dtype (W = the plan's workspace_tokens;
     * mla_chunk_workspace_bytes sizes it), allocated once for a server's
     * lifetime; or, when it is NULL, into the plan's own workspace, which
     * the plan must then have been created with (width L + R, dtype). */
    const mla_chunk_plan *plan;
    void *context_workspace;
    const mla_kv_cache *cache;      /* any dtype; fp8 uses its scale          */
    const int32_t *block_table;     /* [num_prefills, block_table_cols]       */
    int64_t block_table_cols;
    const void *q;
    int64_t q_token_stride, q_head_stride;
    const void *kv_c;               /* [T, L] rows, kv_c_stride apart         */
    int64_t kv_c_stride;
    const void *k_pe;               /* [T, R] rows (unused when R = 0)        */
    int64_t k_pe_stride;
    /* MHA path: kv_b_proj [H*(P+V), L] as nn.Linear stores it (f32, bf16
     * or f16). Absorbed path: w_uk_t and w_uv from mla_prepare_weights. A
     * path's weights may be NULL when no request can take that path. */
    const void *kv_b_proj;
    mla_dtype kv_b_proj_dtype;
    /* or, read instead when not NULL, kv_b_proj packed by
     * mla_pack_kv_b_proj for kv_c_dtype = dtype (kv_b_proj_dtype still
     * names the dtype it was packed from) */
    const void *kv_b_proj_packed;
    const void *w_uk_t, *w_uv;
    mla_dtype w_dtype;
    void *out;                      /* [T, H*V] rows, out_token_stride apart  */
    int64_t out_token_stride;
    mla_prefill_path path;          /* AUTO (0) or one path for every request */
} mla_prefill_args;

/* The path request r of args takes (args->path unless AUTO). The cost model
 * weighs, with constants measured on x86 servers (src/core/policy.h), the
 * MHA path's up-projection of context + new tokens and its 192/128-wide
 * attention against the absorbed path's 576/512-wide attention and its two
 * absorption GEMMs over the new tokens; the absorbed path wins when the new
 * tokens are few next to the context. Reads shapes, query_start_loc and
 * context_lens only. */
MLA_API mla_prefill_path mla_prefill_choose_path(const mla_prefill_args *args, int64_t request);

/* Workspace bytes of mla_prefill: reads shapes, dtypes, the plan's
 * workspace_tokens W and threads only (no data pointer); about
 * T*H*(P+V) + 3*T*H*V elements of dtype, W*H*(P+V) more when a plan is
 * given, and the largest scratch of the steps (flash attention, the packed
 * GEMM, the absorbed decode of up to MLA_PREFILL_ABSORBED_PIECE tokens). */
#define MLA_PREFILL_ABSORBED_PIECE 64

MLA_API mla_status mla_prefill_workspace_size(const mla_prefill_args *args, int threads,
                                              int64_t *bytes);

/* A server's prefill limits, for one workspace allocated once for its
 * lifetime (mla_decode_limits is decode's). */
typedef struct mla_prefill_limits {
    int64_t max_prefills;  /* prefill requests in a call, >= 0                */
    int64_t max_tokens;    /* T, new tokens in a call, >= 0                   */
    int64_t context_workspace_tokens; /* W of the calls' plans, >= 0 (as
                              mla_chunk_workspace_tokens gives it)          */
    int64_t num_heads, kv_lora_rank, rope_dim, qk_nope_dim, v_head_dim;
    mla_dtype dtype;       /* the calls' dtype                                */
    int max_threads;       /* <= 0: mla_default_threads() now                 */
} mla_prefill_limits;

/* Bytes of workspace that suffice for every mla_prefill call within lim:
 * num_prefills <= max_prefills, num_tokens <= max_tokens, a plan of at
 * most context_workspace_tokens rows, the same heads, dims and dtype, any
 * path, kv_b_proj of any dtype packed ahead or not, and threads resolving
 * to at most max_threads' count: *bytes >= what mla_prefill_workspace_size
 * gives for any such call. */
MLA_API mla_status mla_prefill_workspace_bound(const mla_prefill_limits *lim, int64_t *bytes);
/* Every argument, the plan against the batch, every block id the call
 * will read and the backend of every step (a forced one that cannot run a
 * step fails the call) are checked before anything is written. The
 * workspace must not share a byte with any other buffer of the call (q,
 * kv_c, k_pe, out, the weights, the cache, the plan's workspace, the index
 * arrays): the call rejects one that does, as its steps would only after
 * earlier steps had written. */
MLA_API mla_status mla_prefill(const mla_prefill_args *args, void *workspace,
                               int64_t workspace_bytes, int threads);

/* Whether every backend that would run decode and prefill for cfg accepts
 * cfg->block_size (vLLM's MultipleOf rule); *required_multiple gets the
 * least common multiple of their block_size_multiple (1 = any). */
MLA_API mla_status mla_block_size_supported(const mla_config *cfg, bool *supported,
                                            int64_t *required_multiple);

#ifdef __cplusplus
}
#endif

#endif /* MLA_H */
