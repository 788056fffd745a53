/* test_errors.c: errors always say why, over the whole public API. Every public function that
 * returns sx_status (the calls generated from the installed headers by scripts/gen_error_tests.py
 * into api_errors.h at build time, a few functions per test): called with NULL pointers and
 * invalid scalars, it fails and leaves an sx_last_error() message that names it. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "sx_tensor.h"

/* The check of one generated call: `s` is what `name` returned for the worst arguments. It must
 * fail (unless the generator's allow-list says SX_OK is legitimate: may_ok), and any failure
 * must leave a message that names the function. */
static void api_expect_error(const char *name, sx_status s, bool may_ok)
{
    if (!may_ok)
        cr_expect_neq(s, SX_OK, "%s returned SX_OK for NULL/invalid arguments", name);
    if (s == SX_OK)
        return;
    const char *msg = sx_last_error();
    cr_expect(msg[0] != '\0', "%s returned %s without a message", name, sx_status_str(s));
    cr_expect(strstr(msg, name) != NULL, "%s returned %s; its message does not name it: \"%s\"",
              name, sx_status_str(s), msg);
}

#define API_EXPECT_ERROR(name, s, may_ok) api_expect_error(name, s, may_ok)

#include "api_errors.h"

/* The generator found the API (a parser broken by a header change would find nothing). */
Test(api_errors, generator_covers_the_api)
{
    cr_assert_gt(API_ERRORS_COUNT, 150, "only %d functions generated", API_ERRORS_COUNT);
}

/* sx_error sets the message the generated checks read, and sx_error_clear empties it. */
Test(api_errors, error_sets_and_clear_empties_the_message)
{
    sx_status s = sx_error(SX_E_ARG, "sx_tensor_new: rank %d", -1);
    cr_assert_eq(s, SX_E_ARG);
    cr_assert_str_eq(sx_last_error(), "sx_tensor_new: rank -1");
    sx_error_clear();
    cr_assert_str_eq(sx_last_error(), "");
}
