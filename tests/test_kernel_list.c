/*
 * The kernel list of mla_backend.h, driven by mla_kernel_slots() so that a
 * slot appended to MLA_KERNEL_SLOTS is checked here without editing these
 * tests: the slots lay out mla_kernels exactly; every backend's table has
 * every base kernel and exactly the route kernels it should; a registered
 * descriptor's NULL base kernels become ref's and its NULL routes stay NULL;
 * every slot names the suite that tests its kernel; registration checks the
 * descriptor's size.
 */
#include "support.h"

#include <stddef.h>
#include <string.h>

#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

static int reset_state(void **state)
{
    (void)state;
    support_use_cpu(NULL);
    return 0;
}

/* The backends that carry a route kernel; every other (backend, route)
 * pair is NULL. */
static const struct {
    const char *backend, *slot;
} route_kernels[] = {
    {"avx512_bf16", "gemm_bf16dot"},
    {"neon_bf16", "gemm_bf16dot"},
    {"neon_fhm", "gemm_f16f16"},
    {"avx512_amx", "gemm_bf16tile"},
};

/* The suite that runs each slot's kernel on every backend this CPU can run:
 * a slot missing here fails test_every_slot_has_a_suite, so a new kernel
 * cannot land untested. */
static const struct {
    const char *slot, *suite;
} coverage[] = {
    {"cvt_bf16_f32", "test_convert"}, {"cvt_f32_bf16", "test_convert"},
    {"cvt_f16_f32", "test_convert"},  {"cvt_f32_f16", "test_convert"},
    {"exp_f32", "test_convert"},      {"cvt_f32_e4m3", "test_convert"},
    {"cvt_e4m3_f32", "test_convert"}, {"cvt_f32_e5m2", "test_convert"},
    {"cvt_e5m2_f32", "test_convert"}, {"copy_stream", "test_cache"},
    {"store_fence", "test_cache"},    {"gemm_f32", "test_gemm"},
    {"gemm_bf16", "test_gemm"},       {"gemm_f16f16", "test_gemm"},
    {"gemm_bf16dot", "test_gemm_bf16dot"}, {"scale_add_f32", "test_merge"},
    {"gemm_bf16tile", "test_gemm_bf16dot"}, {"interleave_u16", "test_gemm_bf16dot"},
    {"transpose_u32", "test_gemm"}, {"softmax_tile", "test_merge"},
    {"transpose_pairs_bf16", "test_gemm"},
    {"merge_pair", "test_merge"},
    {"cvt_e4m3_bf16", "test_convert"}, {"cvt_e5m2_bf16", "test_convert"},
};

static const mla_kernel_slot *find_slot(const char *name)
{
    int count;
    const mla_kernel_slot *slots = mla_kernel_slots(&count);
    for (int i = 0; i < count; i++)
        if (strcmp(slots[i].name, name) == 0)
            return &slots[i];
    return NULL;
}

static bool should_have_route(const char *backend, const char *slot)
{
    for (int i = 0; i < COUNT(route_kernels); i++)
        if (strcmp(route_kernels[i].backend, backend) == 0 &&
            strcmp(route_kernels[i].slot, slot) == 0)
            return true;
    return false;
}

/* The slots are mla_kernels' pointers, in order, each once: loops over them
 * see the whole table. */
static void test_slots_lay_out_the_table(void **state)
{
    (void)state;
    int count;
    const mla_kernel_slot *slots = mla_kernel_slots(&count);
    assert_true(count > 0);
    assert_int_equal((size_t)count * sizeof(void *), sizeof(mla_kernels));
    for (int i = 0; i < count; i++) {
        if (slots[i].offset != (size_t)i * sizeof(void *))
            fail_msg("slot %d (%s) at offset %zu, want %zu", i, slots[i].name, slots[i].offset,
                     (size_t)i * sizeof(void *));
        assert_ptr_equal(find_slot(slots[i].name), &slots[i]); /* names are unique */
    }
}

static void test_every_backend_table(void **state)
{
    (void)state;
    int count;
    const mla_kernel_slot *slots = mla_kernel_slots(&count);
    for (int i = 0; i < mla_backend_count(); i++) {
        const mla_backend_desc *b = mla_backend_at(i);
        for (int s = 0; s < count; s++) {
            bool present = mla_kernel_get(&b->kernels, &slots[s]) != NULL;
            if (!slots[s].route && !present)
                fail_msg("backend %s: base slot %s is NULL", b->name, slots[s].name);
            if (slots[s].route && present != should_have_route(b->name, slots[s].name))
                fail_msg("backend %s: route slot %s is %s, want %s", b->name, slots[s].name,
                         present ? "set" : "NULL", present ? "NULL" : "set");
        }
    }
    /* the expectations name real route slots, and some backend built here */
    int built = 0;
    for (int i = 0; i < COUNT(route_kernels); i++) {
        const mla_kernel_slot *slot = find_slot(route_kernels[i].slot);
        if (!slot || !slot->route)
            fail_msg("route_kernels names %s, which is not a route slot", route_kernels[i].slot);
        built += mla_backend_find(route_kernels[i].backend) != NULL;
    }
    assert_true(built >= 1);
}

static void test_null_kernels_inherit_ref(void **state)
{
    (void)state;
    mla_backend_desc d = {.size = sizeof d, .name = "bare", .isa = "ref",
                          .ops = 1u << MLA_OP_CONVERT};
    assert_int_equal(mla_register_backend(&d, false), MLA_OK);
    const mla_kernels *bare = &mla_backend_find("bare")->kernels;
    const mla_kernels *ref = &mla_backend_find("ref")->kernels;
    int count;
    const mla_kernel_slot *slots = mla_kernel_slots(&count);
    for (int s = 0; s < count; s++) {
        void *got = mla_kernel_get(bare, &slots[s]);
        if (slots[s].route && got)
            fail_msg("route slot %s: a NULL route kernel must stay NULL (no such route)",
                     slots[s].name);
        if (!slots[s].route && got != mla_kernel_get(ref, &slots[s]))
            fail_msg("base slot %s: a NULL kernel must inherit ref's", slots[s].name);
    }
}

static void test_every_slot_has_a_suite(void **state)
{
    (void)state;
    int count;
    const mla_kernel_slot *slots = mla_kernel_slots(&count);
    for (int s = 0; s < count; s++) {
        int i = 0;
        while (i < COUNT(coverage) && strcmp(coverage[i].slot, slots[s].name) != 0)
            i++;
        if (i == COUNT(coverage))
            fail_msg("kernel slot %s has no suite in the coverage table of %s: add the suite "
                     "that runs its kernel on every backend", slots[s].name, __FILE__);
    }
    for (int i = 0; i < COUNT(coverage); i++)
        if (!find_slot(coverage[i].slot))
            fail_msg("the coverage table names %s (%s), which is not a kernel slot",
                     coverage[i].slot, coverage[i].suite);
}

static void test_descriptor_size(void **state)
{
    (void)state;
    /* room past the descriptor, so a library that wrongly read `size`
     * bytes would still read memory of ours */
    struct {
        mla_backend_desc d;
        unsigned char beyond[64];
    } big = {.d = {.name = "sized", .isa = "ref", .ops = 1u << MLA_OP_CONVERT}};
    const struct {
        size_t size;
        const char *bad_input;
    } bad[] = {
        {0, "desc->size 0"},
        {sizeof(mla_backend_desc) + sizeof(void *), "desc->size of a newer header's descriptor"},
        {offsetof(mla_backend_desc, kernels), "desc->size below the first version's"},
    };
    for (int i = 0; i < COUNT(bad); i++) {
        big.d.size = bad[i].size;
        support_expect_reject("mla_register_backend", bad[i].bad_input,
                              mla_register_backend(&big.d, false), MLA_ERR_INVALID_ARGUMENT,
                              "size");
        assert_null(mla_backend_find("sized"));
    }
    big.d.size = sizeof(mla_backend_desc);
    assert_int_equal(mla_register_backend(&big.d, false), MLA_OK);
    assert_int_equal(mla_backend_find("sized")->size, sizeof(mla_backend_desc));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_slots_lay_out_the_table, reset_state),
        cmocka_unit_test_setup(test_every_backend_table, reset_state),
        cmocka_unit_test_setup(test_null_kernels_inherit_ref, reset_state),
        cmocka_unit_test_setup(test_every_slot_has_a_suite, reset_state),
        cmocka_unit_test_setup(test_descriptor_size, reset_state),
    };
    return cmocka_run_group_tests_name("kernel_list", tests, NULL, reset_state);
}
