/* Dispatch internals: detection, the backend registry, selection. */
#ifndef MLA_DISPATCH_H
#define MLA_DISPATCH_H

#include "mla_backend.h"

/* The real CPU reader (CPUID/XCR0 or getauxval). It only looks at the AMX
 * permission; asking for it is mla_cpu_request_amx's. */
void mla_cpu_read(mla_cpu_raw *raw);

/* Asks Linux for AMX tile data state (arch_prctl ARCH_REQ_XCOMP_PERM); true
 * if granted. Init calls it, once, when an AMX backend could run. */
bool mla_cpu_request_amx(void);

/* The test seam for that request under a fake CPU reader: fn answers in its
 * place for the fake CPU (NULL restores mla_cpu_request_amx). What the real
 * CPU may execute is still read from Linux, never from fn. Takes effect at
 * the next initialization. */
typedef bool mla_amx_request_fn(void);
void mla_dispatch_set_amx_request(mla_amx_request_fn *fn);

/* The capabilities an MLA_MAX_ISA level (a backend's name, in any case)
 * keeps; false for an unknown level. */
bool mla_isa_level_mask(const char *name, mla_caps *keep);

/* Writes the MLA_MAX_ISA levels, comma separated, into buf (always
 * NUL-terminated when size > 0). Returns the length the full text needs. */
size_t mla_isa_levels_format(char *buf, size_t size);

/* Built-in backends of this architecture, in priority order. */
const mla_backend_desc *mla_builtin_backends(int *count);

/* Initializes if needed, then picks the backend for op/cfg (see
 * mla_select_backend) and returns its kernel table and name. */
mla_status mla_dispatch(mla_op op, const mla_config *cfg, const mla_kernels **kernels,
                        const char **backend_name);

/* Records the backend that ran the calling thread's op (mla_last_backend). */
void mla_note_backend(const char *name);

/* The route the calling thread's last op noted, for the ops whose route
 * only the call itself settles (a packed kv_b_proj records its own): NULL
 * until noted; mla_note_backend clears it. */
void mla_note_route(const char *name);
const char *mla_last_route(void);

/* Forget detection, environment, forced choices and registrations, so the
 * next call initializes again. For tests; not thread-safe. */
void mla_dispatch_reset(void);

#endif
