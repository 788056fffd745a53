/* compile.c: the neural compiler. Forward pass, loss, gradients (autodiff), clipping and every
 * optimiser update are traced into one graph, optimised (the updates fuse into one node per
 * parameter) and frozen with a memory plan; a step then only points the inputs at the batch
 * and runs the frozen order, with no allocation. The eager path builds the same graph in eager
 * mode at every step (each node computed as it is made), for comparison and debugging. The
 * model around the graph (its lifetime, steps, accessors) is model.c's. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

sx_nn_train_params sx_nn_train_params_default(void)
{
    sx_nn_train_params p;
    memset(&p, 0, sizeof p);
    p.epochs = 1;
    p.batch = 100;
    p.loss = SX_LOSS_CROSS_ENTROPY;
    p.optim = sx_optim_params_default(SX_OPTIM_ADAGRAD);
    p.optim.lr = 0.005;
    p.schedule.kind = SX_SCHED_CONSTANT;
    p.shuffle = true;
    p.verbose = 1;
    p.progress_every = 100;
    p.optimise = true;
    p.plan_memory = true;
    p.huber_delta = 1;
    p.ignore_index = -100;
    return p;
}

sx_status nn_set_scalar(sx_cg_graph *g, sx_cg_node *in, double v)
{
    double d = v;
    float f = (float)v;
    sx_dtype dt = sx_cg_node_dtype(in);
    sx_tensor t = sx_tensor_view(dt, 0, NULL, dt == SX_F32 ? (void *)&f : (void *)&d);
    return sx_cg_input_set(g, in, &t, SX_CG_COPY);
}

sx_status nn_graph_status(sx_cg_graph *g)
{
    sx_status s = sx_cg_graph_status(g);
    return s != SX_OK ? s : sx_error(SX_E_STATE, "nn: a graph node could not be made");
}

/* The schedule's rate from the base-rate input lr and the step input (sx_nn_schedule_node): lr
 * itself for a host schedule. */
static sx_status schedule_rate(sx_cg_graph *g, const sx_nn_train_params *p, sx_cg_node *lr,
                               sx_cg_node *step, sx_cg_node **out)
{
    if ((*out = sx_nn_schedule_node(g, &p->schedule, lr, step)) != NULL)
        return SX_OK;
    sx_status s = sx_cg_graph_status(g);
    return s != SX_OK ? s : SX_E_ARG; /* a bad schedule: the message is set */
}

/* The group of parameter pr (NULL: none) */
static const sx_nn_param_group *group_of(const sx_nn_train_params *p, const nn_param *pr)
{
    for (int i = 0; i < p->n_groups; i++) {
        const sx_nn_param_group *gr = &p->groups[i];
        if ((gr->select == SX_GROUP_NAME && gr->name != NULL && strstr(pr->name, gr->name)) ||
            (gr->select == SX_GROUP_WEIGHTS && pr->regularised) ||
            (gr->select == SX_GROUP_NOT_WEIGHTS && !pr->regularised))
            return gr;
    }
    return NULL;
}

/* Parameter pr's optimiser settings and rate: its group's weight decay and lr_scale (the rate
 * node itself without a group, or a scale of 1). */
static sx_status group_rate(sx_cg_graph *g, const sx_nn_train_params *p, const nn_param *pr,
                            sx_cg_node *rate, sx_optim_params *op, sx_cg_node **out)
{
    const sx_nn_param_group *gr = group_of(p, pr);
    *op = p->optim;
    *out = rate;
    if (gr == NULL)
        return SX_OK;
    op->weight_decay = gr->weight_decay;
    if (gr->lr_scale != 1 && (*out = sx_cg_mul_scalar(g, rate, gr->lr_scale)) == NULL)
        return nn_graph_status(g);
    return SX_OK;
}

/* The optimiser state tensors of a parameter, made (zero) when missing or of another kind. */
static sx_status ensure_states(sx_nn_net *net, nn_param *p, sx_optim_kind kind)
{
    int ns = sx_optim_n_states(kind);
    if (ns > NN_MAX_STATES) /* an optimiser's bug: raise NN_MAX_STATES */
        return sx_error(SX_E_STATE, "nn: optimiser %s keeps %d states per parameter (at most %d)",
                        sx_optim_name(kind), ns, NN_MAX_STATES);
    bool fresh = p->state_kind != kind;
    for (int k = 0; k < NN_MAX_STATES; k++) {
        if ((fresh || k >= ns) && p->state[k] != NULL) {
            sx_tensor_free(p->state[k]);
            p->state[k] = NULL;
        }
        if (k < ns && p->state[k] == NULL)
            SX_TRY(sx_tensor_zeros(net->dtype, p->value->rank, p->value->shape, &p->state[k]));
    }
    p->state_kind = kind;
    return SX_OK;
}

static sx_status add_out(sx_nn_model *m, sx_cg_node *n)
{
    if (n == NULL)
        return nn_graph_status(m->g);
    sx_cg_node **a = sx_realloc(m->outs, (size_t)(m->n_outs + 1) * sizeof *a);
    if (a == NULL)
        return SX_E_NOMEM;
    m->outs = a;
    m->outs[m->n_outs++] = n;
    return SX_OK;
}

/* Gradient clipping over the list of gradients (in place in the array). */
static sx_status clip(sx_cg_graph *g, const sx_nn_train_params *p, sx_dtype dt, int n,
                      sx_cg_node **grads)
{
    if (p->clip_value > 0)
        for (int i = 0; i < n; i++)
            grads[i] = sx_cg_max(g, sx_cg_min(g, grads[i], sx_cg_scalar_of(g, dt, p->clip_value)),
                                 sx_cg_scalar_of(g, dt, -p->clip_value));
    if (p->clip_norm > 0) {
        /* scale = c / max(||g||, c): 1 while the global norm is within c */
        sx_cg_node *sq = NULL;
        for (int i = 0; i < n; i++) {
            sx_cg_node *t = sx_cg_sum(g, sx_cg_sqr(g, grads[i]), SX_AXES_ALL, false);
            sq = sq == NULL || t == NULL ? t : sx_cg_add(g, sq, t);
            if (sq == NULL) /* stop: the next term would start the sum again without these */
                return nn_graph_status(g);
        }
        sx_cg_node *c = sx_cg_scalar_of(g, dt, p->clip_norm);
        sx_cg_node *scale = sx_cg_div(g, c, sx_cg_max(g, sx_cg_sqrt(g, sq), c));
        for (int i = 0; i < n; i++)
            grads[i] = sx_cg_mul(g, grads[i], scale);
    }
    for (int i = 0; i < n; i++)
        if (grads[i] == NULL)
            return nn_graph_status(g);
    return SX_OK;
}

/* The updates of an eager step. An eager graph computes each node when it is made and first
 * recomputes any input that an assign made stale, so the updates cannot be built in it: after
 * the first parameter's assign, the next gradients (they depend on every weight) and an
 * optimiser's new state (read by the parameter's update after the state's own assign) would be
 * recomputed from half-updated values. The updates are built instead, from the gradients'
 * values, in a small lazy graph evaluated once: within one evaluation every reader of a
 * parameter runs before its assign, as in the compiled graph. */
static sx_status eager_updates(sx_nn_model *m, const nn_feed *f, int np, sx_cg_node *const *grads,
                               nn_param *const *meta)
{
    const sx_nn_train_params *p = &m->c.params;
    sx_dtype dt = m->c.net->dtype;
    sx_cg_graph *u = NULL;
    SX_TRY(sx_cg_graph_new(SX_CG_LAZY, dt, &u));
    sx_cg_node **outs = sx_calloc((size_t)np * (NN_MAX_STATES + 1) + 1, sizeof *outs);
    sx_cg_node *lr = sx_cg_input(u, "lr", dt, 0, NULL), *step = sx_cg_input(u, "step", dt, 0, NULL);
    sx_status s = outs == NULL ? SX_E_NOMEM : lr && step ? SX_OK : nn_graph_status(u);
    if (s == SX_OK)
        s = nn_set_scalar(u, lr, f->lr);
    if (s == SX_OK)
        s = nn_set_scalar(u, step, (double)f->step);
    sx_cg_node *rate = NULL;
    if (s == SX_OK)
        s = schedule_rate(u, p, lr, step, &rate);
    int n = 0, ns = sx_optim_n_states(p->optim.kind);
    for (int i = 0; s == SX_OK && i < np; i++) {
        s = ensure_states(m->c.net, meta[i], p->optim.kind);
        sx_cg_node *states[NN_MAX_STATES] = {NULL};
        sx_cg_node *w = s == SX_OK ? sx_cg_param_borrow(u, meta[i]->name, meta[i]->value) : NULL;
        sx_cg_node *g = s == SX_OK ? sx_cg_const(u, sx_cg_value(grads[i])) : NULL;
        for (int k = 0; s == SX_OK && k < ns; k++) {
            char name[128];
            snprintf(name, sizeof name, "%s.%s", meta[i]->name,
                     sx_optim_state_name(p->optim.kind, k));
            if ((states[k] = sx_cg_param_borrow(u, name, meta[i]->state[k])) == NULL)
                s = nn_graph_status(u);
        }
        if (s == SX_OK && (w == NULL || g == NULL))
            s = nn_graph_status(u);
        int nu = 0;
        sx_optim_params op;
        sx_cg_node *r = NULL;
        if (s == SX_OK)
            s = group_rate(u, p, meta[i], rate, &op, &r);
        if (s == SX_OK)
            s = sx_optim_update(u, &op, w, g, r, step, states, outs + n, &nu);
        n += nu;
    }
    if (s == SX_OK)
        s = sx_cg_eval(u, n, outs);
    sx_free(outs);
    sx_cg_graph_free(u);
    return s;
}

/* The targets' input y, of the output's shape (batch, ...), after the loss's checks; softmax:
 * the network ends in a softmax (heads refused). */
static sx_status targets_input(sx_nn_model *m, bool softmax)
{
    const sx_nn_layer *last = nn_output_layer(m->c.net);
    const sx_nn_train_params *p = &m->c.params;
    int64_t ys[SX_MAX_RANK];
    ys[0] = m->batch;
    memcpy(ys + 1, last->shape, (size_t)last->rank * sizeof *ys);
    SX_TRY(nn_loss_check_net("sx_nn_compile_train", m->c.net, p));
    if (p->sparse_targets) {
        if (p->loss != SX_LOSS_CROSS_ENTROPY || p->n_heads > 0 || p->loss_fn != NULL ||
            m->c.net->n_outputs >= 2 || p->accumulate > 1 || p->eager || last->rank < 1)
            return sx_error(SX_E_UNSUPPORTED,
                            "sx_nn_compile_train: sparse targets take the cross-entropy loss "
                            "over one output of rank >= 1, without heads, a loss function, "
                            "accumulation or the eager path");
        m->train->y = sx_cg_input(m->g, "y", m->c.net->dtype, last->rank, ys);
        return SX_OK;
    }
    if (p->n_heads > 0 && softmax && m->c.net->n_outputs < 2)
        return sx_error(SX_E_ARG,
                        "sx_nn_compile_train: network %s ends in a softmax: heads take logits "
                        "(end in a layer without activation)",
                        m->c.net->name);
    m->train->y = sx_cg_input(m->g, "y", m->c.net->dtype, last->rank + 1, ys);
    return SX_OK;
}

/* The training inputs: targets y (targets_input), the rate and the step (their values when f,
 * an eager step's). */
static sx_status training_inputs(sx_nn_model *m, const nn_feed *f, bool softmax)
{
    sx_cg_graph *g = m->g;
    sx_dtype dt = m->c.net->dtype;
    SX_TRY(targets_input(m, softmax));
    m->train->lr = sx_cg_input(g, "lr", dt, 0, NULL);
    m->train->step = sx_cg_input(g, "step", dt, 0, NULL);
    /* the loss compares the output with standardised targets when the network scales them */
    m->train->yt = m->train->y == NULL || m->c.params.sparse_targets
                       ? m->train->y
                       : nn_prep_target(g, m->c.net, m->train->y);
    if (m->train->y == NULL || m->train->yt == NULL || m->train->lr == NULL ||
        m->train->step == NULL)
        return nn_graph_status(g);
    if (f != NULL) {
        SX_TRY(sx_cg_input_set(g, m->train->y, f->y, SX_CG_BORROW));
        SX_TRY(nn_set_scalar(g, m->train->lr, f->lr));
        SX_TRY(nn_set_scalar(g, m->train->step, (double)f->step));
    }
    return SX_OK;
}

/* The batch's loss (a scalar) from outputs out (logits before a final softmax) and targets y:
 * the user's loss_fn, or the built-in kind (nn_loss_node). */
static sx_status make_loss(sx_nn_model *m, sx_cg_node *out, sx_cg_node *logits, sx_cg_node *y,
                           sx_cg_node **loss)
{
    sx_cg_graph *g = m->g;
    const sx_nn_train_params *p = &m->c.params;
    sx_dtype dt = m->c.net->dtype;
    nn_loss_part parts[SX_NN_MAX_HEADS];
    int np = nn_loss_parts(m->c.net, p, parts);
    *loss = p->loss_fn != NULL ? p->loss_fn(g, out, y, p->loss_ctx)
                               : nn_loss_node(g, p, parts, np, out, logits, y);
    if (*loss == NULL)
        return nn_graph_status(g);
    if (sx_cg_node_size(*loss) != 1 || sx_cg_node_dtype(*loss) != dt)
        return sx_error(SX_E_SHAPE, "nn: the user's loss has %lld elements of %s (want one of %s)",
                        (long long)sx_cg_node_size(*loss), sx_dtype_name(sx_cg_node_dtype(*loss)),
                        sx_dtype_name(dt));
    if (sx_cg_node_rank(*loss) != 0 && (*loss = sx_cg_reshape(g, *loss, 0, NULL)) == NULL)
        return nn_graph_status(g);
    return SX_OK;
}

/* The trainable parameters (nodes ps, meta) of the built forward pass, np of them (arrays of
 * room for all), with the l1/l2 terms of the weights added to *loss. */
static sx_status collect_params(sx_nn_model *m, sx_cg_node **loss, sx_cg_node **ps, nn_param **meta,
                                int *np)
{
    sx_nn_net *net = m->c.net;
    sx_cg_graph *g = m->g;
    const sx_nn_train_params *p = &m->c.params;
    sx_dtype dt = net->dtype;
    *np = 0;
    for (int i = 0; i < net->n_layers; i++) {
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            nn_param *pr = &net->layers[i]->params[k];
            sx_cg_node *node = nn_param_node(&m->c.b, net, i, k);
            if (!pr->trainable || !nn_param_stored(pr) || node == NULL)
                continue;
            if (pr->regularised && p->l2 > 0)
                *loss = sx_cg_add(g, *loss,
                                  sx_cg_mul(g, sx_cg_scalar_of(g, dt, p->l2),
                                            sx_cg_sum(g, sx_cg_sqr(g, node), SX_AXES_ALL, false)));
            if (pr->regularised && p->l1 > 0)
                *loss = sx_cg_add(g, *loss,
                                  sx_cg_mul(g, sx_cg_scalar_of(g, dt, p->l1),
                                            sx_cg_sum(g, sx_cg_abs(g, node), SX_AXES_ALL, false)));
            ps[*np] = node;
            meta[*np] = pr;
            (*np)++;
        }
    }
    return *loss != NULL ? SX_OK : nn_graph_status(g);
}

/* Correct predictions: argmax of the outputs against argmax of the targets, over the last axis
 * (one prediction per example, or per position of an output of rank > 1); with several
 * outputs, the first output's. */
static sx_cg_node *correct_node(const sx_nn_model *m, sx_cg_node *logits, sx_cg_node *y)
{
    sx_cg_graph *g = m->g;
    int ax = nn_output_layer(m->c.net)->rank;
    if (m->c.params.sparse_targets) /* the class indices, not the ignored ones */
        return sx_cg_sum(
            g,
            sx_cg_mul(g, sx_cg_eq(g, sx_cg_argmax(g, logits, SX_AXIS(ax), false), y),
                      sx_cg_ne(g, y, sx_cg_scalar_like(g, y, (double)m->c.params.ignore_index))),
            SX_AXES_ALL, false);
    if (m->c.net->n_outputs >= 2) {
        nn_loss_part parts[SX_NN_MAX_HEADS];
        nn_loss_parts(m->c.net, &m->c.params, parts);
        logits = nn_part_node(g, &parts[0], logits);
        y = nn_part_node(g, &parts[0], y);
        ax = parts[0].rank;
    }
    return sx_cg_sum(g,
                     sx_cg_eq(g, sx_cg_argmax(g, logits, SX_AXIS(ax), false),
                              sx_cg_argmax(g, y, SX_AXIS(ax), false)),
                     SX_AXES_ALL, false);
}

/* The outputs from `first` on, the parameters' updates in layer order, are put in the reverse
 * order: a frozen graph runs its outputs' ancestors in the order of the outputs, so the
 * last layer's update, and with it the backward-kernel op of its gradient, runs as soon as the
 * backward pass reaches that layer, and each layer's input and output gradient are freed there
 * instead of living to the end of the backward pass. The updates are independent of each other:
 * the same values. The updates of one layer (one scope: its parameters, one per optimiser state)
 * stay together in their order. */
static void reverse_updates(sx_nn_model *m, int first)
{
    sx_cg_node **o = m->outs;
    int n = m->n_outs;
    /* reverse the whole range, then each layer's run back */
    for (int a = first, b = n - 1; a < b; a++, b--) {
        sx_cg_node *t = o[a];
        o[a] = o[b];
        o[b] = t;
    }
    for (int a = first; a < n;) {
        int b = a + 1;
        while (b < n && sx_cg_node_scope(o[b]) == sx_cg_node_scope(o[a]))
            b++;
        for (int i = a, j = b - 1; i < j; i++, j--) {
            sx_cg_node *t = o[i];
            o[i] = o[j];
            o[j] = t;
        }
        a = b;
    }
}

/* Clipping, then the update of every parameter (the eager step's, when f) and the batch-norm
 * running statistics as outputs. */
static sx_status emit_updates(sx_nn_model *m, const nn_feed *f, int np, sx_cg_node **ps,
                              sx_cg_node **grads, nn_param **meta)
{
    sx_nn_net *net = m->c.net;
    sx_cg_graph *g = m->g;
    const sx_nn_train_params *p = &m->c.params;
    sx_status s = SX_OK;
    if (m->train->comm != NULL &&
        f == NULL) { /* data-parallel: the gradients summed over the ranks */
        s = nn_dp_new(m);
        if (s == SX_OK)
            s = nn_dp_buckets(m, np, grads);
        if (s == SX_OK)
            m->train->dp->bucket_at = m->n_outs;
        for (int i = 0; s == SX_OK && i < m->train->dp->n_buckets; i++)
            s = add_out(m, m->train->dp->buckets[i]);
    }
    if (s == SX_OK)
        s = clip(g, p, net->dtype, np, grads);
    sx_cg_node *rate = NULL; /* the scheduled rate (in the graph), or the lr input */
    if (s == SX_OK && f == NULL)
        s = schedule_rate(g, p, m->train->lr, m->train->step, &rate);
    if (s == SX_OK && f != NULL)
        s = eager_updates(m, f, np, grads, meta);
    const int first = m->n_outs;
    for (int i = 0; s == SX_OK && f == NULL && i < np; i++) {
        s = ensure_states(net, meta[i], p->optim.kind);
        if (s == SX_OK) /* the optimiser's state and update belong to the parameter's layer */
            s = sx_cg_scope_set(g, sx_cg_node_scope(ps[i]));
        sx_cg_node *states[NN_MAX_STATES] = {NULL};
        int ns = sx_optim_n_states(p->optim.kind);
        for (int k = 0; s == SX_OK && k < ns; k++) {
            char name[128];
            snprintf(name, sizeof name, "%s.%s", meta[i]->name,
                     sx_optim_state_name(p->optim.kind, k));
            states[k] = sx_cg_param_borrow(g, name, meta[i]->state[k]);
            if (states[k] == NULL)
                s = nn_graph_status(g);
        }
        sx_cg_node *ups[NN_MAX_STATES + 1];
        int nu = 0;
        sx_optim_params op;
        sx_cg_node *r = NULL;
        if (s == SX_OK)
            s = group_rate(g, p, meta[i], rate, &op, &r);
        if (s == SX_OK)
            s = sx_optim_update(g, &op, ps[i], grads[i], r, m->train->step, states, ups, &nu);
        for (int k = 0; s == SX_OK && k < nu; k++)
            s = add_out(m, ups[k]);
    }
    if (s == SX_OK && f == NULL)
        reverse_updates(m, first);
    for (int i = 0; s == SX_OK && i < m->c.b.n_updates; i++) /* batch-norm running statistics */
        s = add_out(m, m->c.b.updates[i]);
    return s;
}

/* Room for every parameter of the network: ps, grads, meta (n + 1 each). */
static sx_status param_arrays(const sx_nn_net *net, sx_cg_node ***ps, sx_cg_node ***grads,
                              nn_param ***meta)
{
    int n = 0;
    for (int i = 0; i < net->n_layers; i++)
        n += net->layers[i]->n_params;
    *ps = sx_calloc((size_t)n + 1, sizeof **ps);
    *grads = sx_calloc((size_t)n + 1, sizeof **grads);
    *meta = sx_calloc((size_t)n + 1, sizeof **meta);
    return *ps && *grads && *meta ? SX_OK : SX_E_NOMEM;
}

/* Loss, regularisation, gradients, clipping and the updates of every trainable parameter. */
static sx_status build_training(sx_nn_model *m, sx_cg_node *logits, const nn_feed *f)
{
    sx_cg_graph *g = m->g;
    SX_TRY(training_inputs(m, f, logits != m->out));
    SX_TRY(sx_cg_scope_set(g, "loss"));
    sx_cg_node *loss = NULL;
    SX_TRY(make_loss(m, m->out, logits, m->train->yt, &loss));
    sx_cg_node **ps = NULL, **grads = NULL;
    nn_param **meta = NULL;
    int np = 0;
    sx_status s = param_arrays(m->c.net, &ps, &grads, &meta);
    if (s == SX_OK)
        s = collect_params(m, &loss, ps, meta, &np);
    m->train->loss = loss;
    if (s == SX_OK)
        s = add_out(m, loss);
    if (s == SX_OK) {
        m->train->correct = correct_node(m, logits, m->train->yt);
        s = add_out(m, m->train->correct);
    }
    if (s == SX_OK)
        s = sx_ad_grad(g, loss, np, ps, grads);
    if (s == SX_OK)
        s = emit_updates(m, f, np, ps, grads, meta);
    sx_free(ps);
    sx_free(grads);
    sx_free(meta);
    return s;
}

/* Rows [lo, hi) of x (batch, ...). */
static sx_cg_node *rows_of(sx_cg_graph *g, sx_cg_node *x, int64_t lo, int64_t hi)
{
    sx_slice sl[SX_MAX_RANK];
    for (int i = 0; i < SX_MAX_RANK; i++)
        sl[i] = SX_SLICE_ALL;
    sl[0] = (sx_slice){lo, hi, 1};
    return sx_cg_slice(g, x, sl);
}

/* Gradient accumulation inside the graph (p.accumulate = k > 1): the batch split into k
 * micro-batches (sizes differing by at most one), each traced forward, its loss weighted by its
 * share of the batch and differentiated at once, before the next is traced; the gradients are
 * summed and one update step follows. The loss is the batch's (the weighted sum), as without
 * accumulation. Micro-batch j + 1 reads its rows through seq views ordered after every
 * gradient sum of micro-batches 0..j, so the frozen order finishes one micro-batch's forward and
 * backward passes before the next starts and the planner reuses its activations' memory. */
static sx_cg_node *after_grads(sx_cg_graph *g, sx_cg_node *x, int np, sx_cg_node *const *grads)
{
    for (int i = 0; x != NULL && i < np; i++) {
        sx_cg_node *in[2] = {x, grads[i]};
        x = sx_cg_op_new(g, SX_OP_SEQ, 2, in, NULL);
    }
    return x;
}

static sx_status build_accumulated(sx_nn_model *m, sx_cg_node *x)
{
    sx_nn_net *net = m->c.net;
    sx_cg_graph *g = m->g;
    const int64_t B = m->batch, k = m->c.params.accumulate < B ? m->c.params.accumulate : B;
    for (int i = 0; i < net->n_layers; i++)
        if (net->layers[i]->kind == L_BATCHNORM)
            return sx_error(SX_E_UNSUPPORTED,
                            "network %s: gradient accumulation with batch norm (%s) would "
                            "normalise by the micro-batches' statistics",
                            net->name, net->layers[i]->name);
    sx_cg_node **ps = NULL, **grads = NULL, **gj = NULL;
    nn_param **meta = NULL;
    int np = 0;
    sx_status s = param_arrays(net, &ps, &grads, &meta);
    int all = 0;
    for (int i = 0; i < net->n_layers; i++)
        all += net->layers[i]->n_params;
    if (s == SX_OK && (gj = sx_calloc((size_t)all + 1, sizeof *gj)) == NULL)
        s = SX_E_NOMEM;
    sx_cg_node *total = NULL, *correct = NULL;
    for (int64_t j = 0, lo = 0; s == SX_OK && j < k; j++) {
        const int64_t n = B / k + (j < B % k), hi = lo + n;
        sx_cg_node *src = j == 0 ? x : after_grads(g, x, np, grads);
        sx_cg_node *xj = src != NULL ? rows_of(g, src, lo, hi) : NULL, *yj = NULL;
        sx_cg_node *out = NULL, *logits = NULL, *lj = NULL;
        s = xj != NULL ? nn_forward(net, &m->c.b, xj, &out, &logits) : nn_graph_status(g);
        if (s == SX_OK && j == 0) { /* the inputs, once the output is known */
            m->out = out;
            m->c.softmax_out = logits != out;
            s = training_inputs(m, NULL, m->c.softmax_out);
        }
        if (s == SX_OK && (yj = rows_of(g, m->train->yt, lo, hi)) == NULL)
            s = nn_graph_status(g);
        if (s == SX_OK)
            s = sx_cg_scope_set(g, "loss");
        if (s == SX_OK)
            s = make_loss(m, out, logits, yj, &lj);
        if (s == SX_OK && (lj = sx_cg_mul_scalar(g, lj, (double)n / (double)B)) == NULL)
            s = nn_graph_status(g);
        if (s == SX_OK && j == 0) /* the l1/l2 terms once */
            s = collect_params(m, &lj, ps, meta, &np);
        if (s == SX_OK)
            s = sx_ad_grad(g, lj, np, ps, j == 0 ? grads : gj);
        for (int i = 0; s == SX_OK && j > 0 && i < np; i++)
            if ((grads[i] = sx_cg_add(g, grads[i], gj[i])) == NULL)
                s = nn_graph_status(g);
        sx_cg_node *cj = s == SX_OK ? correct_node(m, logits, yj) : NULL;
        total = j == 0 ? lj : sx_cg_add(g, total, lj);
        correct = j == 0 ? cj : sx_cg_add(g, correct, cj);
        if (s == SX_OK && (total == NULL || correct == NULL))
            s = nn_graph_status(g);
        lo = hi;
    }
    m->train->loss = total;
    m->train->correct = correct;
    if (s == SX_OK)
        s = add_out(m, total);
    if (s == SX_OK)
        s = add_out(m, correct);
    if (s == SX_OK)
        s = emit_updates(m, NULL, np, ps, grads, meta);
    sx_free(ps);
    sx_free(grads);
    sx_free(meta);
    sx_free(gj);
    return s;
}

/* Build a model's graph for the public function `who`. f != NULL: an eager graph computed with
 * these input values. */
sx_status nn_model_build(const char *who, sx_nn_model *m, const nn_feed *f)
{
    sx_nn_net *net = m->c.net;
    SX_TRY(sx_cg_graph_new(f ? SX_CG_EAGER : SX_CG_LAZY, net->dtype, &m->g));
    sx_cg_graph *g = m->g;
    m->c.b.g = g;
    m->c.b.mode = m->train ? NN_TRAIN : NN_INFER;
    SX_TRY(sx_cg_rng_new(g, 0, &m->c.b.rng_id));
    *sx_cg_rng(g, m->c.b.rng_id) = net->dropout_rng;

    sx_nn_layer *in = nn_input_layer(net), *last = nn_output_layer(net);
    /* a smaller graph of a model compiled before the network's error (a layer refused since)
     * is built from the same, valid layers */
    if (net->status != SX_OK && m->owner == NULL)
        return nn_net_refused(who, net);
    if (in == NULL || last == NULL)
        return sx_error(SX_E_STATE, "network %s has no input layer", net->name);
    int64_t xs[SX_MAX_RANK];
    xs[0] = m->batch;
    memcpy(xs + 1, m->in_shape, (size_t)m->in_rank * sizeof *xs);
    m->x = sx_cg_input(g, "x", net->dtype, m->in_rank + 1, xs);
    if (m->x == NULL)
        return nn_graph_status(g);
    if (f != NULL)
        SX_TRY(sx_cg_input_set(g, m->x, f->x, SX_CG_BORROW));
    if (m->train && f == NULL && m->c.params.accumulate > 1 && m->batch > 1)
        return build_accumulated(m, m->x);
    sx_cg_node *logits = NULL;
    SX_TRY(nn_forward(net, &m->c.b, m->x, &m->out, &logits));
    m->c.softmax_out = logits != m->out;
    if (!m->train)
        return add_out(m, m->out);
    return build_training(m, logits, f);
}

/* Optimise and freeze a lazy model graph, filling the report. */
sx_status nn_model_compile(sx_nn_model *m)
{
    double t0 = sx_seconds();
    sx_cg_stats st = sx_cg_graph_stats(m->g);
    m->report.nodes_before = m->report.nodes_after = st.nodes;
    m->report.edges_before = m->report.edges_after = st.edges;
    if (m->c.params.optimise) {
        sx_cg_opt_report r;
        /* inference: batch norm's scale folded into the preceding convolution */
        sx_cg_opt_params op = sx_cg_opt_params_default();
        op.enable[SX_PASS_BN_FOLD] = !m->train;
        SX_TRY(sx_cg_optimise(m->g, m->n_outs, m->outs, &op, &r));
        m->report.nodes_after = r.nodes_after;
        m->report.edges_after = r.edges_after;
        m->report.optimise_seconds = r.seconds;
        m->report.opt = r;
    }
    sx_cg_freeze_params fp = sx_cg_freeze_params_default();
    fp.plan_memory = m->c.params.plan_memory;
    fp.arena = m->lend;
    fp.arena_bytes = m->lend_bytes;
    sx_cg_plan_report pr;
    SX_TRY(sx_cg_freeze_ex(m->g, m->n_outs, m->outs, &fp, &pr));
    m->report.planned_bytes = pr.arena_bytes;
    m->report.naive_bytes = pr.naive_bytes;
    m->report.peak_live_bytes = pr.peak_live_bytes;
    m->report.plan_seconds = pr.seconds;
    m->report.plan = pr;
    m->report.compile_seconds = sx_seconds() - t0;
    return SX_OK;
}
