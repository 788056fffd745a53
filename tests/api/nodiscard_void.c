/* nodiscard_void.c: compiled (not run) by ctest with -Werror: a status-returning call whose
 * result is cast to void compiles without a warning (SX_NODISCARD allows the cast), and with
 * -DSX_DROP_RESULT the same call without the cast must fail to compile (the attribute works). */
#include "sx_tensor.h"

int nodiscard_void(void);

int nodiscard_void(void)
{
    (void)sx_threads_set_local(0); /* dropped on purpose */
#ifdef SX_DROP_RESULT
    sx_threads_set_local(0); /* dropped by mistake: a warning, an error under -Werror */
#endif
    return 0;
}
