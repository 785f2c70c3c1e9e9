/* test_helpers.c - the comparators themselves can fail. */
#include <criterion/criterion.h>
#include <math.h>

#include "helpers.h"

Test(helpers, allclose_accepts_equal)
{
    float a[3] = {1, 2, 3}, b[3] = {1, 2, 3};
    cr_assert(th_allclose("equal", a, b, 3, 0, 0));
}

Test(helpers, allclose_rejects_difference)
{
    float a[3] = {1, 2, 3.01f}, b[3] = {1, 2, 3};
    cr_assert_not(th_allclose("differ (expected failure)", a, b, 3, 1e-6, 1e-6));
}

Test(helpers, allclose_rejects_nan)
{
    float a[2] = {1, NAN}, b[2] = {1, 2};
    cr_assert_not(th_allclose("nan (expected failure)", a, b, 2, 1e9, 1e9));
}
