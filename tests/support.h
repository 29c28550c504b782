/* Shared test helpers: fake CPUs, a clean library state, backend loops, the
 * check of a rejected call. */
#ifndef MLA_TEST_SUPPORT_H
#define MLA_TEST_SUPPORT_H

#include <mla.h>
#include <mla_backend.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* Raw readings of real CPUs, as their CPUID/XCR0 or hwcaps report them. */
extern const mla_cpu_raw support_cpu_zen3;            /* AVX2 + FMA + F16C           */
extern const mla_cpu_raw support_cpu_sapphire_rapids; /* AVX-512 + BF16 + FP16 + AMX */
extern const mla_cpu_raw support_cpu_granite_rapids;  /* Sapphire Rapids + AMX-FP16  */
extern const mla_cpu_raw support_cpu_spr_no_zmm_os;   /* same CPU, OS saves no ZMM   */
extern const mla_cpu_raw support_cpu_graviton3;       /* Neoverse V1                 */
extern const mla_cpu_raw support_cpu_neoverse_n1;     /* Graviton2: no BF16, no FHM  */

/* Installs a reader presenting `raw` (NULL: the real CPU), clears every MLA_*
 * environment variable, registration and AMX request hook
 * (mla_dispatch_set_amx_request), so the next call re-initializes. */
void support_use_cpu(const mla_cpu_raw *raw);

/* Sets (value != NULL) or clears an environment variable, then resets the
 * library so that init reads it. */
void support_setenv(const char *name, const char *value);

/* True if the text contains the needle; on failure prints both. */
bool support_contains(const char *text, const char *needle);

/* Deterministic xorshift64 stream shared by the property tests (seeded, so a
 * failure reproduces). */
uint64_t support_random(void);
/* Uniform in [lo, hi] (hi - lo small against 2^64). */
int64_t support_random_in(int64_t lo, int64_t hi);

/* Runs run(b, ctx) once per backend b that this CPU can run `op` on for cfg
 * (NULL: the CPU and op checks only), in priority order, with `op` forced
 * onto b, so that a case gets every kernel set the machine has. Each backend
 * it passes over gets a [ SKIPPED  ] line naming it and the reasons
 * mla_backend_validate gives for cfg (once per backend and first reason in
 * a process, so sweeps over many configs stay readable). Auto-selection is
 * restored afterwards.
 * Returns the number of backends run: callers that need one assert it. */
int support_each_backend(mla_op op, const mla_config *cfg,
                         void (*run)(const mla_backend_desc *b, void *ctx), void *ctx);

/* Fails unless b is the backend whose kernels ran the thread's last op: a
 * forced backend must not be quietly replaced. */
void support_expect_ran(const mla_backend_desc *b);

/* GEMM outputs in the kernel tests: C's m rows (ldc apart) sit in a buffer
 * of c_len floats, starting SUPPORT_C_GUARD elements in; every element
 * outside the m x n submatrix holds SUPPORT_C_GUARD_BITS. */
#define SUPPORT_C_GUARD 19
#define SUPPORT_C_GUARD_BITS 0x7fa5a5a5u

/* Fails, naming who and what, unless got is want bit for bit inside the
 * submatrix and the guard bits everywhere else. */
void support_expect_c(const char *who, const char *what, int64_t m, int64_t n, int64_t ldc,
                      int64_t c_len, const float *want, const float *got);

/* ---- rejected calls ---------------------------------------------------------
 *
 * README.md's table of rejected input is made from the reject tests
 * themselves: every one notes (entry point, bad input, status), and
 * tools/reject_table.sh renders the notes of a run of every suite (make
 * reject-table; make test fails where README.md's table is not that). */

/* Fails unless got is want with a message (mla_last_error()) that holds
 * needle (NULL: any message), naming entry and bad_input; then notes the
 * case as support_note_reject does. The suite checks its own outputs'
 * guard bytes and its inputs. */
void support_expect_reject(const char *entry, const char *bad_input, mla_status got,
                           mla_status want, const char *needle);

/* Notes that `entry` rejects `bad_input` with `status`: when the environment
 * variable TEST_REJECT_TABLE names a file, appends the line
 * "entry<TAB>bad_input<TAB>status name" to it. bad_input says in a few words
 * what was wrong, as an integrator would look it up ("block_size 0",
 * "cu_seqlens_q decreasing"), the same for every backend and CPU: a case
 * tried once per backend notes the same row each time. */
void support_note_reject(const char *entry, const char *bad_input, mla_status status);

/* A backend that runs on any CPU but takes no q dtype, registered (with
 * ref's kernels and the lowest priority) unless the library state has it:
 * forcing it makes every decode and prefill call fail with
 * MLA_ERR_BACKEND_INVALID, so that refusal is tested whatever backends this
 * CPU has. Returns its name. */
const char *support_unfit_backend(void);

#endif
