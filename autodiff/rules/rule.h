/* rule.h: the gradient rules' interface, cgraph/ops/rule.h, under the names used by the two rules
 * files still here, norm.c and batch_norm.c. Their rules are to close cgraph/ops/norm.c and
 * batch_norm.c as every other family's do; until then cgraph builds them from here
 * (cgraph/CMakeLists.txt), and this file and its aliases go when they move. */
#ifndef SX_AUTODIFF_RULE_H
#define SX_AUTODIFF_RULE_H

#include "ops/rule.h"

#define ad_unbroadcast cg_grad_unbroadcast
#define ad_select cg_grad_select
#define ad_scale cg_grad_scale
#define ad_positive_part cg_grad_positive_part
#define ad_signed_part cg_grad_signed_part
#define ad_full sx__cg_grad_full
#define ad_status sx__cg_grad_status

#endif
