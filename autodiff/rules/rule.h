/* rule.h: what every rules file (autodiff/rules/<family>.c, one per cgraph/ops/<family>.c)
 * shares: the rule interface of autodiff_impl.h and three shorthands for a rule's body. */
#ifndef SX_AUTODIFF_RULE_H
#define SX_AUTODIFF_RULE_H

#include "autodiff_impl.h"

/* Input i of the node y being differentiated; y's attributes. */
#define IN(i) sx_cg_node_input(y, i)
#define ATTR (sx_cg_node_attr(y))
/* Finish a rule: a NULL among the needed gradients means a constructor failed. */
#define DONE()                                                                                     \
    do {                                                                                           \
        for (int k_ = 0; k_ < sx_cg_node_n_inputs(y); k_++)                                        \
            if (need[k_] && gin[k_] == NULL && sx_cg_graph_status(g) != SX_OK)                     \
                return ad_status(g);                                                               \
        return SX_OK;                                                                              \
    } while (0)

#endif
