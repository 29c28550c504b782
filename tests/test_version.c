/*
 * The library's version (mla.h): mla_version() is the header's
 * MLA_VERSION_MAJOR.MINOR.PATCH, and MLA_VERSION packs the three into one
 * number that orders versions. The installed pkg-config modules and CMake
 * package carry the same version, as tools/install_check.sh checks
 * (make check-install).
 */
#include <mla.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

/* First in the suite: mla_version() needs no mla_init(). */
static void test_version_is_the_headers(void **state)
{
    (void)state;
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", MLA_VERSION_MAJOR, MLA_VERSION_MINOR,
             MLA_VERSION_PATCH);
    const char *got = mla_version();
    assert_non_null(got);
    assert_string_equal(got, want);
    assert_ptr_equal(mla_version(), got);
}

/* MINOR and PATCH below 100 keep MLA_VERSION's packing one-to-one, so that
 * comparing the numbers compares the versions. */
static void test_version_number_packs_the_parts(void **state)
{
    (void)state;
    assert_in_range(MLA_VERSION_MAJOR, 0, 99);
    assert_in_range(MLA_VERSION_MINOR, 0, 99);
    assert_in_range(MLA_VERSION_PATCH, 0, 99);
    assert_int_equal(MLA_VERSION,
                     MLA_VERSION_MAJOR * 10000 + MLA_VERSION_MINOR * 100 + MLA_VERSION_PATCH);
    assert_int_equal(MLA_VERSION / 10000, MLA_VERSION_MAJOR);
    assert_int_equal(MLA_VERSION / 100 % 100, MLA_VERSION_MINOR);
    assert_int_equal(MLA_VERSION % 100, MLA_VERSION_PATCH);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_is_the_headers),
        cmocka_unit_test(test_version_number_packs_the_parts),
    };
    return cmocka_run_group_tests_name("version", tests, NULL, NULL);
}
