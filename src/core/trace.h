/*
 * MLA_VERBOSE: one line on stderr per top-level call of mla.h, after it
 * returns (docs/semantics.md §6, the environment). Each entry point that does
 * work keeps its body in a static function of its own file and reads
 *
 *     if (!mla_tracing())
 *         return <body>(<its arguments>);
 *     double start = mla_trace_begin();
 *     mla_status st = <body>(<its arguments>);
 *     mla_trace_<op>(start, st, <the arguments its line names>);
 *     return st;
 *
 * mla_trace_begin marks the thread as inside a traced call, so that a call
 * the body makes to another entry point (prefill's up-projection, decode's
 * schedule) sees mla_tracing() false: it is part of its caller's line, not
 * a line of its own. mla_trace_<op>, in the floor that owns the op
 * (src/dispatch/trace.c for the ops, src/metadata/trace.c for the builders),
 * only formats the line and hands it to mla_trace_end, which unmarks the
 * thread and writes it; it never calls an entry point.
 *
 * Off, the cost is the one load and branch of mla_tracing: no clock is read
 * and nothing is formatted.
 */
#ifndef MLA_CORE_TRACE_H
#define MLA_CORE_TRACE_H

#include "mla.h"

#include <stdatomic.h>
#include <stdbool.h>

/* MLA_VERBOSE as read: unread until the first call or init reads it (and
 * again after mla_trace_reset). */
enum { MLA_TRACE_OFF = 0, MLA_TRACE_ON, MLA_TRACE_UNREAD };
extern atomic_int mla_trace_state;

/* mla_tracing's slow path: reads MLA_VERBOSE if unread; true when it is on
 * and the thread is not inside a traced call already. */
bool mla_trace_wanted(void);

/* Whether the calling entry point is to trace this call. */
static inline bool mla_tracing(void)
{
    return atomic_load_explicit(&mla_trace_state, memory_order_relaxed) != MLA_TRACE_OFF &&
           mla_trace_wanted();
}

/* Reads MLA_VERBOSE (init does, once); reset makes the next call read it
 * again (tests). */
void mla_trace_read_env(void);
void mla_trace_reset(void);

/* Marks the thread as inside a traced call and returns its start time.
 * Cold: the compiler lays the traced path out of the untraced one's way
 * (gcc then saves no register before the branch). */
double mla_trace_begin(void) __attribute__((cold));

/* Ends the traced call begun at `start` and writes its line:
 *   mla_verbose,exec,<fn>,backend=<b>,route=<r>,<shape>,threads=<n>,status=<s>,time_us=<t>
 * backend and route NULL print "none"; status is "ok" or the status name
 * without its MLA_ERR_ prefix, lower case; shape is the printf-style
 * fields that name the call's dtypes and sizes ("q=bf16,B=4"). */
void mla_trace_end(double start, const char *fn, const char *backend, const char *route,
                   int threads, mla_status status, const char *shape, ...)
    __attribute__((format(printf, 7, 8)));

#endif
