/* The check every builder taking mla_request runs on a request's token
 * counts, shared so that batch metadata and reordering reject the same
 * requests with the same words. Static inline: no symbol leaves a file. */
#ifndef MLA_METADATA_REQUEST_CHECK_H
#define MLA_METADATA_REQUEST_CHECK_H

#include "core/error.h"

static inline mla_status mla_request_count_negative(const char *fn, int64_t r, const char *field,
                                                    int64_t value)
{
    return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: reqs[%lld].%s = %lld is negative", fn,
                    (long long)r, field, (long long)value);
}

/* reqs[r]'s computed, scheduled and prompt token counts are all >= 0. */
static inline mla_status mla_check_request_counts(const char *fn, const mla_request *reqs,
                                                  int64_t r)
{
    const mla_request *q = &reqs[r];
    if (q->num_computed_tokens < 0)
        return mla_request_count_negative(fn, r, "num_computed_tokens", q->num_computed_tokens);
    if (q->num_scheduled_tokens < 0)
        return mla_request_count_negative(fn, r, "num_scheduled_tokens", q->num_scheduled_tokens);
    if (q->num_prompt_tokens < 0)
        return mla_request_count_negative(fn, r, "num_prompt_tokens", q->num_prompt_tokens);
    return MLA_OK;
}

#endif
