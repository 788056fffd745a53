/* model.c: the neural compiler. Forward pass, loss, gradients (autodiff), clipping and every
 * optimiser update are traced into one graph, optimised (the updates fuse into one node per
 * parameter) and frozen with a memory plan; a step then only points the inputs at the batch
 * and runs the frozen order, with no allocation. The eager path builds the same graph in eager
 * mode at every step (each node computed as it is made), for comparison and debugging.
 * Inference through a model (smaller batches, sub-batches) is in predict.c. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Values of the inputs, for eager graphs (which compute while they are built). */
typedef struct feed {
    const sx_tensor *x, *y;
    double lr;
    int64_t step;
} feed;

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

static sx_status set_scalar(sx_cg_graph *g, sx_cg_node *in, double v)
{
    double d = v;
    float f = (float)v;
    sx_dtype dt = sx_cg_node_dtype(in);
    sx_tensor t = sx_tensor_view(dt, 0, NULL, dt == SX_F32 ? (void *)&f : (void *)&d);
    return sx_cg_input_set(g, in, &t, SX_CG_COPY);
}

static sx_status graph_status(sx_cg_graph *g)
{
    sx_status s = sx_cg_graph_status(g);
    return s != SX_OK ? s : sx_error(SX_E_STATE, "nn: a graph node could not be made");
}

void sx_nn_model_free(sx_nn_model *m)
{
    if (m == NULL)
        return;
    sx_nn_net *net = m->net;
    bool train = m->train;
    for (int i = 0; i < NN_SMALLER; i++)
        sx_nn_model_free(m->smaller[i]);
    for (int i = 0; i < NN_REPLICAS; i++)
        sx_nn_model_free(m->rep[i]);
    nn_build_free(&m->b);
    nn_dp_free(m->dp);
    sx_tensor_free(m->stage_x);
    sx_tensor_free(m->stage_y);
    sx_cg_graph_free(m->g);
    sx_free(m->outs);
    if (!m->sibling) { /* after every graph that reads its weights */
        sx_cg_graph_free(m->plain);
        for (int i = 0; i < NN_FILE_META; i++)
            sx_free(m->file_meta[i]);
        nn_prep_free(m->lprep);
        sx_free(m->lprep);
    }
    if (!m->sibling && m->src != NULL) {
        if (m->src->free != NULL)
            m->src->free(m->src->ctx);
        sx_free(m->src);
    }
    sx_free(m);
    if (net == NULL) /* a loaded model */
        return;
    net->n_models--;
    if (train)
        net->n_train_models--;
    if (net->orphan && net->n_models == 0) /* sx_nn_net_free came first */
        sx_nn_net_free(net);
}

sx_nn_compile_report sx_nn_model_report(const sx_nn_model *m)
{
    sx_nn_compile_report zero;
    memset(&zero, 0, sizeof zero);
    return m != NULL ? m->report : zero;
}

sx_cg_graph *sx_nn_model_graph(sx_nn_model *m)
{
    return m != NULL ? m->g : NULL;
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
        return graph_status(g);
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
        return graph_status(m->g);
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
                return graph_status(g);
        }
        sx_cg_node *c = sx_cg_scalar_of(g, dt, p->clip_norm);
        sx_cg_node *scale = sx_cg_div(g, c, sx_cg_max(g, sx_cg_sqrt(g, sq), c));
        for (int i = 0; i < n; i++)
            grads[i] = sx_cg_mul(g, grads[i], scale);
    }
    for (int i = 0; i < n; i++)
        if (grads[i] == NULL)
            return graph_status(g);
    return SX_OK;
}

/* The updates of an eager step. An eager graph computes each node when it is made and first
 * recomputes any input that an assign made stale, so the updates cannot be built in it: after
 * the first parameter's assign, the next gradients (they depend on every weight) and an
 * optimiser's new state (read by the parameter's update after the state's own assign) would be
 * recomputed from half-updated values. The updates are built instead, from the gradients'
 * values, in a small lazy graph evaluated once: within one evaluation every reader of a
 * parameter runs before its assign, as in the compiled graph. */
static sx_status eager_updates(sx_nn_model *m, const feed *f, int np, sx_cg_node *const *grads,
                               nn_param *const *meta)
{
    const sx_nn_train_params *p = &m->params;
    sx_dtype dt = m->net->dtype;
    sx_cg_graph *u = NULL;
    SX_TRY(sx_cg_graph_new(SX_CG_LAZY, dt, &u));
    sx_cg_node **outs = sx_calloc((size_t)np * (NN_MAX_STATES + 1) + 1, sizeof *outs);
    sx_cg_node *lr = sx_cg_input(u, "lr", dt, 0, NULL), *step = sx_cg_input(u, "step", dt, 0, NULL);
    sx_status s = outs == NULL ? SX_E_NOMEM : lr && step ? SX_OK : graph_status(u);
    if (s == SX_OK)
        s = set_scalar(u, lr, f->lr);
    if (s == SX_OK)
        s = set_scalar(u, step, (double)f->step);
    sx_cg_node *rate = NULL;
    if (s == SX_OK)
        s = schedule_rate(u, p, lr, step, &rate);
    int n = 0, ns = sx_optim_n_states(p->optim.kind);
    for (int i = 0; s == SX_OK && i < np; i++) {
        s = ensure_states(m->net, meta[i], p->optim.kind);
        sx_cg_node *states[NN_MAX_STATES] = {NULL};
        sx_cg_node *w = s == SX_OK ? sx_cg_param_borrow(u, meta[i]->name, meta[i]->value) : NULL;
        sx_cg_node *g = s == SX_OK ? sx_cg_const(u, sx_cg_value(grads[i])) : NULL;
        for (int k = 0; s == SX_OK && k < ns; k++) {
            char name[128];
            snprintf(name, sizeof name, "%s.%s", meta[i]->name,
                     sx_optim_state_name(p->optim.kind, k));
            if ((states[k] = sx_cg_param_borrow(u, name, meta[i]->state[k])) == NULL)
                s = graph_status(u);
        }
        if (s == SX_OK && (w == NULL || g == NULL))
            s = graph_status(u);
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
    const sx_nn_layer *last = nn_output_layer(m->net);
    const sx_nn_train_params *p = &m->params;
    int64_t ys[SX_MAX_RANK];
    ys[0] = m->batch;
    memcpy(ys + 1, last->shape, (size_t)last->rank * sizeof *ys);
    SX_TRY(nn_loss_check_net("sx_nn_compile_train", m->net, p));
    if (p->sparse_targets) {
        if (p->loss != SX_LOSS_CROSS_ENTROPY || p->n_heads > 0 || p->loss_fn != NULL ||
            m->net->n_outputs >= 2 || p->accumulate > 1 || p->eager || last->rank < 1)
            return sx_error(SX_E_UNSUPPORTED,
                            "sx_nn_compile_train: sparse targets take the cross-entropy loss "
                            "over one output of rank >= 1, without heads, a loss function, "
                            "accumulation or the eager path");
        m->y = sx_cg_input(m->g, "y", m->net->dtype, last->rank, ys);
        return SX_OK;
    }
    if (p->n_heads > 0 && softmax && m->net->n_outputs < 2)
        return sx_error(SX_E_ARG,
                        "sx_nn_compile_train: network %s ends in a softmax: heads take logits "
                        "(end in a layer without activation)",
                        m->net->name);
    m->y = sx_cg_input(m->g, "y", m->net->dtype, last->rank + 1, ys);
    return SX_OK;
}

/* The training inputs: targets y (targets_input), the rate and the step (their values when f,
 * an eager step's). */
static sx_status training_inputs(sx_nn_model *m, const feed *f, bool softmax)
{
    sx_cg_graph *g = m->g;
    sx_dtype dt = m->net->dtype;
    SX_TRY(targets_input(m, softmax));
    m->lr = sx_cg_input(g, "lr", dt, 0, NULL);
    m->step = sx_cg_input(g, "step", dt, 0, NULL);
    /* the loss compares the output with standardised targets when the network scales them */
    m->yt = m->y == NULL || m->params.sparse_targets ? m->y : nn_prep_target(g, m->net, m->y);
    if (m->y == NULL || m->yt == NULL || m->lr == NULL || m->step == NULL)
        return graph_status(g);
    if (f != NULL) {
        SX_TRY(sx_cg_input_set(g, m->y, f->y, SX_CG_BORROW));
        SX_TRY(set_scalar(g, m->lr, f->lr));
        SX_TRY(set_scalar(g, m->step, (double)f->step));
    }
    return SX_OK;
}

/* The batch's loss (a scalar) from outputs out (logits before a final softmax) and targets y:
 * the user's loss_fn, or the built-in kind (nn_loss_node). */
static sx_status make_loss(sx_nn_model *m, sx_cg_node *out, sx_cg_node *logits, sx_cg_node *y,
                           sx_cg_node **loss)
{
    sx_cg_graph *g = m->g;
    const sx_nn_train_params *p = &m->params;
    sx_dtype dt = m->net->dtype;
    nn_loss_part parts[SX_NN_MAX_HEADS];
    int np = nn_loss_parts(m->net, p, parts);
    *loss = p->loss_fn != NULL ? p->loss_fn(g, out, y, p->loss_ctx)
                               : nn_loss_node(g, p, parts, np, out, logits, y);
    if (*loss == NULL)
        return graph_status(g);
    if (sx_cg_node_size(*loss) != 1 || sx_cg_node_dtype(*loss) != dt)
        return sx_error(SX_E_SHAPE, "nn: the user's loss has %lld elements of %s (want one of %s)",
                        (long long)sx_cg_node_size(*loss), sx_dtype_name(sx_cg_node_dtype(*loss)),
                        sx_dtype_name(dt));
    if (sx_cg_node_rank(*loss) != 0 && (*loss = sx_cg_reshape(g, *loss, 0, NULL)) == NULL)
        return graph_status(g);
    return SX_OK;
}

/* The trainable parameters (nodes ps, meta) of the built forward pass, np of them (arrays of
 * room for all), with the l1/l2 terms of the weights added to *loss. */
static sx_status collect_params(sx_nn_model *m, sx_cg_node **loss, sx_cg_node **ps, nn_param **meta,
                                int *np)
{
    sx_nn_net *net = m->net;
    sx_cg_graph *g = m->g;
    const sx_nn_train_params *p = &m->params;
    sx_dtype dt = net->dtype;
    *np = 0;
    for (int i = 0; i < net->n_layers; i++) {
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            nn_param *pr = &net->layers[i]->params[k];
            sx_cg_node *node = nn_param_node(&m->b, net, i, k);
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
    return *loss != NULL ? SX_OK : graph_status(g);
}

/* Correct predictions: argmax of the outputs against argmax of the targets, over the last axis
 * (one prediction per example, or per position of an output of rank > 1); with several
 * outputs, the first output's. */
static sx_cg_node *correct_node(const sx_nn_model *m, sx_cg_node *logits, sx_cg_node *y)
{
    sx_cg_graph *g = m->g;
    int ax = nn_output_layer(m->net)->rank;
    if (m->params.sparse_targets) /* the class indices, not the ignored ones */
        return sx_cg_sum(
            g,
            sx_cg_mul(g, sx_cg_eq(g, sx_cg_argmax(g, logits, SX_AXIS(ax), false), y),
                      sx_cg_ne(g, y, sx_cg_scalar_like(g, y, (double)m->params.ignore_index))),
            SX_AXES_ALL, false);
    if (m->net->n_outputs >= 2) {
        nn_loss_part parts[SX_NN_MAX_HEADS];
        nn_loss_parts(m->net, &m->params, parts);
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
static sx_status emit_updates(sx_nn_model *m, const feed *f, int np, sx_cg_node **ps,
                              sx_cg_node **grads, nn_param **meta)
{
    sx_nn_net *net = m->net;
    sx_cg_graph *g = m->g;
    const sx_nn_train_params *p = &m->params;
    sx_status s = SX_OK;
    if (m->comm != NULL && f == NULL) { /* data-parallel: the gradients summed over the ranks */
        s = nn_dp_new(m);
        if (s == SX_OK)
            s = nn_dp_buckets(m, np, grads);
        if (s == SX_OK)
            m->dp->bucket_at = m->n_outs;
        for (int i = 0; s == SX_OK && i < m->dp->n_buckets; i++)
            s = add_out(m, m->dp->buckets[i]);
    }
    if (s == SX_OK)
        s = clip(g, p, net->dtype, np, grads);
    sx_cg_node *rate = NULL; /* the scheduled rate (in the graph), or the lr input */
    if (s == SX_OK && f == NULL)
        s = schedule_rate(g, p, m->lr, m->step, &rate);
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
                s = graph_status(g);
        }
        sx_cg_node *ups[NN_MAX_STATES + 1];
        int nu = 0;
        sx_optim_params op;
        sx_cg_node *r = NULL;
        if (s == SX_OK)
            s = group_rate(g, p, meta[i], rate, &op, &r);
        if (s == SX_OK)
            s = sx_optim_update(g, &op, ps[i], grads[i], r, m->step, states, ups, &nu);
        for (int k = 0; s == SX_OK && k < nu; k++)
            s = add_out(m, ups[k]);
    }
    if (s == SX_OK && f == NULL)
        reverse_updates(m, first);
    for (int i = 0; s == SX_OK && i < m->b.n_updates; i++) /* batch-norm running statistics */
        s = add_out(m, m->b.updates[i]);
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
static sx_status build_training(sx_nn_model *m, sx_cg_node *logits, const feed *f)
{
    sx_cg_graph *g = m->g;
    SX_TRY(training_inputs(m, f, logits != m->out));
    SX_TRY(sx_cg_scope_set(g, "loss"));
    sx_cg_node *loss = NULL;
    SX_TRY(make_loss(m, m->out, logits, m->yt, &loss));
    sx_cg_node **ps = NULL, **grads = NULL;
    nn_param **meta = NULL;
    int np = 0;
    sx_status s = param_arrays(m->net, &ps, &grads, &meta);
    if (s == SX_OK)
        s = collect_params(m, &loss, ps, meta, &np);
    m->loss = loss;
    if (s == SX_OK)
        s = add_out(m, loss);
    if (s == SX_OK) {
        m->correct = correct_node(m, logits, m->yt);
        s = add_out(m, m->correct);
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
    sx_nn_net *net = m->net;
    sx_cg_graph *g = m->g;
    const int64_t B = m->batch, k = m->params.accumulate < B ? m->params.accumulate : B;
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
        s = xj != NULL ? nn_forward(net, &m->b, xj, &out, &logits) : graph_status(g);
        if (s == SX_OK && j == 0) { /* the inputs, once the output is known */
            m->out = out;
            m->softmax_out = logits != out;
            s = training_inputs(m, NULL, m->softmax_out);
        }
        if (s == SX_OK && (yj = rows_of(g, m->yt, lo, hi)) == NULL)
            s = graph_status(g);
        if (s == SX_OK)
            s = sx_cg_scope_set(g, "loss");
        if (s == SX_OK)
            s = make_loss(m, out, logits, yj, &lj);
        if (s == SX_OK && (lj = sx_cg_mul_scalar(g, lj, (double)n / (double)B)) == NULL)
            s = graph_status(g);
        if (s == SX_OK && j == 0) /* the l1/l2 terms once */
            s = collect_params(m, &lj, ps, meta, &np);
        if (s == SX_OK)
            s = sx_ad_grad(g, lj, np, ps, j == 0 ? grads : gj);
        for (int i = 0; s == SX_OK && j > 0 && i < np; i++)
            if ((grads[i] = sx_cg_add(g, grads[i], gj[i])) == NULL)
                s = graph_status(g);
        sx_cg_node *cj = s == SX_OK ? correct_node(m, logits, yj) : NULL;
        total = j == 0 ? lj : sx_cg_add(g, total, lj);
        correct = j == 0 ? cj : sx_cg_add(g, correct, cj);
        if (s == SX_OK && (total == NULL || correct == NULL))
            s = graph_status(g);
        lo = hi;
    }
    m->loss = total;
    m->correct = correct;
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
static sx_status build(const char *who, sx_nn_model *m, const feed *f)
{
    sx_nn_net *net = m->net;
    SX_TRY(sx_cg_graph_new(f ? SX_CG_EAGER : SX_CG_LAZY, net->dtype, &m->g));
    sx_cg_graph *g = m->g;
    m->b.g = g;
    m->b.mode = m->train ? NN_TRAIN : NN_INFER;
    SX_TRY(sx_cg_rng_new(g, 0, &m->b.rng_id));
    *sx_cg_rng(g, m->b.rng_id) = net->dropout_rng;

    sx_nn_layer *in = nn_input_layer(net), *last = nn_output_layer(net);
    /* a smaller graph of a model compiled before the network's error (a layer refused since)
     * is built from the same, valid layers */
    if (net->status != SX_OK && !m->sibling)
        return nn_net_refused(who, net);
    if (in == NULL || last == NULL)
        return sx_error(SX_E_STATE, "network %s has no input layer", net->name);
    int64_t xs[SX_MAX_RANK];
    xs[0] = m->batch;
    memcpy(xs + 1, m->in_shape, (size_t)m->in_rank * sizeof *xs);
    m->x = sx_cg_input(g, "x", net->dtype, m->in_rank + 1, xs);
    if (m->x == NULL)
        return graph_status(g);
    if (f != NULL)
        SX_TRY(sx_cg_input_set(g, m->x, f->x, SX_CG_BORROW));
    if (m->train && f == NULL && m->params.accumulate > 1 && m->batch > 1)
        return build_accumulated(m, m->x);
    sx_cg_node *logits = NULL;
    SX_TRY(nn_forward(net, &m->b, m->x, &m->out, &logits));
    m->softmax_out = logits != m->out;
    if (!m->train)
        return add_out(m, m->out);
    return build_training(m, logits, f);
}

/* Optimise and freeze a lazy model graph, filling the report. */
static sx_status compile(sx_nn_model *m)
{
    double t0 = sx_seconds();
    sx_cg_stats st = sx_cg_graph_stats(m->g);
    m->report.nodes_before = m->report.nodes_after = st.nodes;
    m->report.edges_before = m->report.edges_after = st.edges;
    if (m->params.optimise) {
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
    fp.plan_memory = m->params.plan_memory;
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

sx_status nn_check_train_kind(const sx_nn_net *net, sx_optim_kind kind, const char *who)
{
    if (net->n_train_models > 0 && net->train_kind != kind)
        return sx_error(SX_E_STATE,
                        "%s: a training model with optimiser %s is alive over network %s: free it "
                        "before training with %s (the two would share the parameters' optimiser "
                        "state)",
                        who, sx_optim_name(net->train_kind), net->name, sx_optim_name(kind));
    return SX_OK;
}

/* A new model over net (counted in the network, which refuses new layers while it lives). */
static sx_status model_new(const char *who, sx_nn_net *net, const sx_nn_train_params *p,
                           int64_t batch, bool train, sx_nn_model **out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    *out = NULL;
    if (net == NULL)
        return sx_error(SX_E_ARG, "%s: net is NULL", who);
    if (batch < 1)
        return sx_error(SX_E_ARG, "%s: batch %lld (want >= 1)", who, (long long)batch);
    /* every layer's value with the batch axis must fit */
    for (int i = 0; i < net->n_layers; i++) {
        const sx_nn_layer *l = net->layers[i];
        int64_t n = sx_shape_size(l->rank, l->shape);
        if (n > INT64_MAX / 8 / batch) {
            char a[160];
            return sx_error(
                SX_E_SHAPE, "%s: a batch of %lld examples of layer %s's %s has too many elements",
                who, (long long)batch, l->name, sx_shape_str(l->rank, l->shape, a, sizeof a));
        }
    }
    sx_nn_train_params params = p ? *p : sx_nn_train_params_default();
    if (train)
        SX_TRY(nn_check_train_kind(net, params.optim.kind, who));
    nn_prep_freeze(net); /* the graph is built with the preprocessing as it is now */
    sx_nn_model *m = sx_calloc(1, sizeof *m);
    if (m == NULL)
        return SX_E_NOMEM;
    m->net = net;
    m->train = train;
    m->batch = batch;
    m->params = params;
    m->n_layers = net->n_layers;
    m->dtype = net->dtype;
    m->ids_in = nn_input_ids_count(net) > 0 && nn_input_ids_count(net) == nn_input_count(net);
    const sx_nn_layer *in = nn_input_layer(net), *last = nn_output_layer(net);
    if (in != NULL)
        m->in_rank = nn_input_shape(net, m->in_shape); /* (total) with several inputs */
    m->classes = last != NULL && last->rank == 1 && net->n_outputs < 2 ? last->shape[0] : 0;
    if (last != NULL) {
        m->out_rank = last->rank;
        memcpy(m->out_shape, last->shape, (size_t)last->rank * sizeof *m->out_shape);
    }
    net->n_models++;
    if (train) {
        net->n_train_models++;
        net->train_kind = params.optim.kind;
        m->comm = sx_nn_comm_of(&params); /* data-parallel over it when it has > 1 rank */
    }
    *out = m;
    return SX_OK;
}

sx_status sx_nn_compile_train(sx_nn_net *net, const sx_nn_train_params *p, int64_t batch,
                              sx_nn_model **out)
{
    SX_TRY(model_new("sx_nn_compile_train", net, p, batch, true, out));
    sx_nn_model *m = *out;
    double t0 = sx_seconds();
    sx_status s = build("sx_nn_compile_train", m, NULL);
    if (s == SX_OK)
        s = compile(m);
    if (s != SX_OK) {
        sx_nn_model_free(m);
        *out = NULL;
        return s;
    }
    m->report.compile_seconds = sx_seconds() - t0;
    return SX_OK;
}

/* The inference graph, planned in `lend` when it fits there (else in an arena of its own). */
sx_status nn_compile_infer_at(const char *who, sx_nn_net *net, int64_t batch, void *lend,
                              size_t lend_bytes, bool sibling, sx_nn_model **out)
{
    SX_TRY(model_new(who, net, NULL, batch, false, out));
    sx_nn_model *m = *out;
    m->sibling = sibling;
    m->lend = lend;
    m->lend_bytes = lend_bytes;
    double t0 = sx_seconds();
    sx_status s = build(who, m, NULL);
    if (s == SX_OK)
        s = compile(m);
    if (s != SX_OK) {
        sx_nn_model_free(m);
        *out = NULL;
        return s;
    }
    m->report.compile_seconds = sx_seconds() - t0;
    return SX_OK;
}

sx_status sx_nn_compile_infer(sx_nn_net *net, int64_t batch, sx_nn_model **out)
{
    return nn_compile_infer_at("sx_nn_compile_infer", net, batch, NULL, 0, false, out);
}

sx_status nn_compile_infer_lent(sx_nn_net *net, int64_t batch, const sx_nn_model *lender,
                                sx_nn_model **out)
{
    size_t bytes = 0;
    void *lend = lender != NULL ? sx_cg_arena(lender->g, &bytes) : NULL;
    return nn_compile_infer_at("sx_nn_compile_infer", net, batch, lend, bytes, false, out);
}

sx_status nn_batch_float(const char *who, const char *what, const sx_nn_model *m,
                         const sx_tensor *x, bool ints_ok, sx_tensor **stage, const sx_tensor **out)
{
    *out = x;
    if (x == NULL || !sx_dtype_is_int(x->dtype))
        return SX_OK; /* nn_check_batch judges it */
    if (!ints_ok)
        return sx_error(SX_E_DTYPE,
                        "%s: %s is %s; integer batches are for inputs of ids (sx_nn_input_ids) "
                        "and sparse targets, this model takes %s",
                        who, what, sx_dtype_name(x->dtype), sx_dtype_name(m->dtype));
    if (*stage == NULL || !sx_shape_equal((*stage)->rank, (*stage)->shape, x->rank, x->shape)) {
        sx_tensor_free(*stage);
        *stage = NULL;
        SX_TRY(sx_tensor_new(m->dtype, x->rank, x->shape, stage));
    }
    /* an index travels through the graph as a float: it must be held exactly */
    const int64_t lim = m->dtype == SX_F32 ? (int64_t)1 << 24 : (int64_t)1 << 53;
    for (int64_t i = 0; i < x->size; i++) {
        int64_t v = x->dtype == SX_I32 ? SX_I32P(x)[i] : SX_I64P(x)[i];
        if (v > lim || v < -lim)
            return sx_error(SX_E_RANGE,
                            "%s: %s element %lld is %lld, beyond the %s model's exact "
                            "integers (|v| <= %lld)",
                            who, what, (long long)i, (long long)v, sx_dtype_name(m->dtype),
                            (long long)lim);
    }
    SX_TRY(sx_tensor_cast_out(x, *stage));
    *out = *stage;
    return SX_OK;
}

sx_status nn_check_batch(const char *who, const sx_nn_model *m, const sx_tensor *t, int rank,
                         const int64_t *shape, int64_t rows)
{
    if (t == NULL)
        return sx_error(SX_E_ARG, "%s: NULL tensor", who);
    if (t->dtype != m->dtype)
        return sx_error(SX_E_DTYPE, "%s: the batch is %s, the model %s", who,
                        sx_dtype_name(t->dtype), sx_dtype_name(m->dtype));
    bool ok = t->rank == rank && t->shape[0] == rows;
    for (int i = 1; ok && i < rank; i++)
        ok = t->shape[i] == shape[i];
    if (!ok) {
        char a[128], b[128];
        int64_t want[SX_MAX_RANK];
        memcpy(want, shape, (size_t)rank * sizeof *want);
        want[0] = rows;
        return sx_error(SX_E_SHAPE, "%s: batch of shape %s, want %s", who,
                        sx_shape_str(t->rank, t->shape, a, sizeof a),
                        sx_shape_str(rank, want, b, sizeof b));
    }
    return SX_OK;
}

/* Weights may have changed since the last run (another model sharing them trained, or a
 * checkpoint was loaded): what depends on them is recomputed. */
sx_status nn_invalidate_params(sx_nn_model *m)
{
    int n = m->n_layers * NN_MAX_PARAMS;
    for (int i = 0; m->b.param_nodes != NULL && i < n; i++)
        if (m->b.param_nodes[i] != NULL)
            SX_TRY(sx_cg_invalidate(m->g, m->b.param_nodes[i]));
    return SX_OK;
}

static sx_status read_results(sx_nn_model *m, double *loss, int64_t *correct)
{
    if (loss != NULL)
        *loss = sx_tensor_get(sx_cg_value(m->loss), 0);
    if (correct != NULL)
        *correct = (int64_t)sx_tensor_get(sx_cg_value(m->correct), 0);
    return SX_OK;
}

sx_status sx_nn_model_step(sx_nn_model *m, const sx_tensor *x, const sx_tensor *y, double lr,
                           int64_t step, double *loss, int64_t *correct)
{
    const char *who = "sx_nn_model_step";
    if (m == NULL || !m->train)
        return sx_error(SX_E_ARG, "%s: not a training model", who);
    SX_TRY(nn_batch_float(who, "x", m, x, m->ids_in, &m->stage_x, &x));
    SX_TRY(nn_batch_float(who, "y", m, y, m->params.sparse_targets, &m->stage_y, &y));
    SX_TRY(nn_check_batch(who, m, x, sx_cg_node_rank(m->x), sx_cg_node_shape(m->x), m->batch));
    SX_TRY(nn_check_batch(who, m, y, sx_cg_node_rank(m->y), sx_cg_node_shape(m->y), m->batch));
    sx_nn_net *net = m->net;
    sx_cg_graph *g = m->g;
    SX_TRY(sx_cg_input_set(g, m->x, x, SX_CG_BORROW));
    SX_TRY(sx_cg_input_set(g, m->y, y, SX_CG_BORROW));
    SX_TRY(set_scalar(g, m->lr, lr));
    SX_TRY(set_scalar(g, m->step, (double)step));
    for (int i = 0; i < m->b.n_masks; i++) /* a new dropout mask every step */
        SX_TRY(sx_cg_invalidate(g, m->b.masks[i]));
    SX_TRY(nn_invalidate_params(m));
    *sx_cg_rng(g, m->b.rng_id) = net->dropout_rng;
    if (m->dp != NULL) /* data-parallel: this rank's share and dropout rows */
        SX_TRY(nn_dp_before_step(m));
    SX_TRY(sx_cg_eval(g, m->n_outs, m->outs));
    net->dropout_rng = *sx_cg_rng(g, m->b.rng_id);
    return read_results(m, loss, correct);
}

/* One eager step: the whole graph is built, and so computed, with the batch's values. */
sx_status nn_eager_step(sx_nn_net *net, const sx_nn_train_params *p, const sx_tensor *x,
                        const sx_tensor *y, double lr, int64_t step, double *loss, int64_t *correct)
{
    sx_nn_model *m = NULL;
    SX_TRY(model_new("sx_nn_train (eager step)", net, p, x->shape[0], true, &m));
    feed f = {x, y, lr, step};
    sx_status s = build("sx_nn_train (eager step)", m, &f);
    if (s == SX_OK) {
        read_results(m, loss, correct);
        net->dropout_rng = *sx_cg_rng(m->g, m->b.rng_id);
    }
    sx_nn_model_free(m);
    return s;
}

/* Inference without the compiler: the forward graph built in eager mode (each node computed as
 * it is made, every intermediate kept until the graph is freed), for comparison with the
 * compiled path (bench/zoo --eager). */
sx_status sx_nn_predict_eager(sx_nn_net *net, const sx_tensor *x, sx_tensor *out)
{
    const char *who = "sx_nn_predict_eager";
    if (net == NULL || x == NULL || out == NULL)
        return sx_error(SX_E_ARG, "%s: NULL argument", who);
    int64_t n = x->rank > 0 ? x->shape[0] : 0;
    if (n < 1)
        return sx_error(SX_E_SHAPE, "%s: %lld examples (want >= 1)", who, (long long)n);
    sx_nn_model *m = NULL;
    SX_TRY(model_new(who, net, NULL, n, false, &m));
    int64_t want[SX_MAX_RANK], xs[SX_MAX_RANK];
    want[0] = n;
    memcpy(want + 1, m->out_shape, (size_t)m->out_rank * sizeof *want);
    xs[0] = n;
    memcpy(xs + 1, m->in_shape, (size_t)m->in_rank * sizeof *xs);
    sx_status s = nn_batch_float(who, "x", m, x, m->ids_in, &m->stage_x, &x);
    if (s == SX_OK)
        s = nn_check_batch(who, m, x, m->in_rank + 1, xs, n);
    if (s == SX_OK && out->dtype != m->dtype)
        s = sx_error(SX_E_DTYPE, "%s: out is %s, the network's outputs %s", who,
                     sx_dtype_name(out->dtype), sx_dtype_name(m->dtype));
    if (s == SX_OK && !sx_shape_equal(out->rank, out->shape, m->out_rank + 1, want)) {
        char a[160], b[160];
        s = sx_error(SX_E_SHAPE, "%s: out has shape %s, the result %s", who,
                     sx_shape_str(out->rank, out->shape, a, sizeof a),
                     sx_shape_str(m->out_rank + 1, want, b, sizeof b));
    }
    feed f = {x, NULL, 0, 0};
    if (s == SX_OK)
        s = build(who, m, &f);
    if (s == SX_OK)
        s = sx_tensor_copy_out(sx_cg_value(m->out), out);
    sx_nn_model_free(m);
    return s;
}

int sx_nn_model_input_rank(const sx_nn_model *m)
{
    return m != NULL ? m->in_rank : 0;
}

const int64_t *sx_nn_model_input_shape(const sx_nn_model *m)
{
    return m != NULL ? m->in_shape : NULL;
}

int64_t sx_nn_model_classes(const sx_nn_model *m)
{
    return m != NULL ? m->classes : 0;
}

double sx_nn_model_input_scale(const sx_nn_model *m)
{
    return sx_nn_model_preprocess(m).input_scale;
}

sx_dtype sx_nn_model_dtype(const sx_nn_model *m)
{
    return m != NULL ? m->dtype : (sx_dtype)-1;
}

/* ---------------------------------------------------------------- a model's outputs, inputs */

int sx_nn_model_output_rank(const sx_nn_model *m)
{
    return m != NULL ? m->out_rank : 0;
}

const int64_t *sx_nn_model_output_shape(const sx_nn_model *m)
{
    return m != NULL ? m->out_shape : NULL;
}

int sx_nn_model_n_outputs(const sx_nn_model *m)
{
    return m == NULL ? 0 : m->net != NULL ? nn_output_count(m->net) : m->n_parts;
}

const char *sx_nn_model_output(const sx_nn_model *m, int k, int *rank, const int64_t **shape)
{
    if (m == NULL || k < 0 || k >= sx_nn_model_n_outputs(m))
        return NULL;
    if (m->net != NULL) {
        const sx_nn_layer *l = nn_output_at(m->net, k);
        if (rank != NULL)
            *rank = l->rank;
        if (shape != NULL)
            *shape = l->shape;
        return m->net->n_outputs > 0 ? m->net->output_names[k] : "y";
    }
    if (rank != NULL)
        *rank = m->part_rank[k];
    if (shape != NULL)
        *shape = m->part_shape[k];
    return m->part_names[k];
}

int sx_nn_model_n_inputs(const sx_nn_model *m)
{
    return m == NULL ? 0 : m->net != NULL ? nn_input_count(m->net) : m->n_in_parts;
}

const int64_t *sx_nn_model_input(const sx_nn_model *m, int k, int *rank)
{
    if (m == NULL || k < 0 || k >= sx_nn_model_n_inputs(m))
        return NULL;
    if (m->net == NULL) {
        if (rank != NULL)
            *rank = m->in_part_rank[k];
        return m->in_part_shape[k];
    }
    for (int i = 0; i < m->net->n_layers; i++) {
        const sx_nn_layer *l = m->net->layers[i];
        if (l->kind == L_INPUT && k-- == 0) {
            if (rank != NULL)
                *rank = l->rank;
            return l->shape;
        }
    }
    return NULL;
}
