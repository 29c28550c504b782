#include "trace.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LINE_LEN 512

atomic_int mla_trace_state = MLA_TRACE_UNREAD;

/* whether the thread is inside a traced call: its inner entry points run
 * untraced */
static _Thread_local bool in_call;

void mla_trace_read_env(void)
{
    const char *v = getenv("MLA_VERBOSE");
    bool on = v && v[0] && strcmp(v, "0") != 0;
    atomic_store_explicit(&mla_trace_state, on ? MLA_TRACE_ON : MLA_TRACE_OFF,
                          memory_order_relaxed);
}

void mla_trace_reset(void)
{
    atomic_store_explicit(&mla_trace_state, MLA_TRACE_UNREAD, memory_order_relaxed);
}

bool mla_trace_wanted(void)
{
    if (atomic_load_explicit(&mla_trace_state, memory_order_relaxed) == MLA_TRACE_UNREAD)
        mla_trace_read_env();
    return atomic_load_explicit(&mla_trace_state, memory_order_relaxed) == MLA_TRACE_ON && !in_call;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

double mla_trace_begin(void)
{
    in_call = true;
    return now_us();
}

/* "ok", "invalid_argument", ...: the status name after MLA_ or MLA_ERR_. */
static void status_word(mla_status status, char *buf, size_t size)
{
    const char *name = mla_status_str(status);
    const char *tail = strncmp(name, "MLA_ERR_", 8) == 0 ? name + 8 : name + 4;
    size_t i = 0;
    for (; tail[i] && i + 1 < size; i++)
        buf[i] = (char)tolower((unsigned char)tail[i]);
    buf[i] = '\0';
}

void mla_trace_end(double start, const char *fn, const char *backend, const char *route,
                   int threads, mla_status status, const char *shape, ...)
{
    double us = now_us() - start;
    in_call = false;
    char fields[LINE_LEN / 2], word[32], line[LINE_LEN];
    va_list ap;
    va_start(ap, shape);
    vsnprintf(fields, sizeof fields, shape, ap);
    va_end(ap);
    status_word(status, word, sizeof word);
    snprintf(line, sizeof line,
             "mla_verbose,exec,%s,backend=%s,route=%s,%s,threads=%d,status=%s,time_us=%.3f\n", fn,
             backend && backend[0] ? backend : "none", route ? route : "none", fields, threads, word,
             us);
    /* one write per line, so that threads tracing at once do not interleave */
    fputs(line, stderr);
}
