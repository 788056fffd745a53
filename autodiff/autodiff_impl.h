/* autodiff_impl.h: autodiff's inside (never installed). The reverse sweep (grad.c) reads each
 * op's gradient rule and nograd column from cgraph (cgraph/cgraph_grad.h, lent to this module):
 * the rules close their families' files, cgraph/ops/<family>.c (cgraph/ops/rule.h), beside the
 * ops they differentiate. */
#ifndef SX_AUTODIFF_IMPL_H
#define SX_AUTODIFF_IMPL_H

#include "cgraph_grad.h"
#include "sx_autodiff.h"

#endif
