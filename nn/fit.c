/* fit.c: the public training calls. sx_nn_fit checks its parameters and data and runs the loop
 * (loop.c); sx_nn_train is a thin wrapper over the same run: its image set as a source, its
 * test set judged after every epoch, epochs counted from the network's start. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static sx_status check_params(const char *who, const sx_nn_train_params *p)
{
    if (p->epochs < 1 || p->batch < 1)
        return sx_error(SX_E_ARG, "%s: epochs %d, batch %d (want >= 1)", who, p->epochs, p->batch);
    if ((unsigned)p->optim.kind >= SX_OPTIM_COUNT)
        return sx_error(SX_E_ARG, "%s: unknown optimiser %d", who, (int)p->optim.kind);
    if (!(p->optim.lr > 0) || !isfinite(p->optim.lr))
        return sx_error(SX_E_ARG, "%s: learning rate %g (want > 0)", who, p->optim.lr);
    if (!(p->l1 >= 0) || !(p->l2 >= 0) || !(p->clip_value >= 0) || !(p->clip_norm >= 0) ||
        !isfinite(p->l1 + p->l2 + p->clip_value + p->clip_norm))
        return sx_error(SX_E_ARG,
                        "%s: regularisation l1 %g, l2 %g or clipping %g, %g (want finite "
                        ">= 0)",
                        who, p->l1, p->l2, p->clip_value, p->clip_norm);
    if (p->checkpoint_every < 0 || p->progress_every < 0)
        return sx_error(SX_E_ARG, "%s: checkpoint_every %lld, progress_every %lld (want >= 0)", who,
                        (long long)p->checkpoint_every, (long long)p->progress_every);
    if (p->schedule.kind == SX_SCHED_EXPLICIT &&
        (p->schedule.values == NULL || p->schedule.n_values < 1))
        return sx_error(SX_E_ARG, "%s: an explicit schedule needs values", who);
    if (p->eager && sx_nn_comm_of(p) != NULL)
        return sx_error(SX_E_ARG, "%s: eager training over %d ranks (want the compiled graph)", who,
                        sx_nn_comm_of(p)->size);
    if (p->accumulate < 0 || (p->accumulate > 1 && p->eager))
        return sx_error(SX_E_ARG, "%s: accumulate %d%s (want >= 0, and the compiled graph)", who,
                        p->accumulate, p->eager ? " with eager" : "");
    if (p->n_groups < 0 || (p->n_groups > 0 && p->groups == NULL))
        return sx_error(SX_E_ARG, "%s: %d parameter groups at %p", who, p->n_groups,
                        (const void *)p->groups);
    for (int i = 0; i < p->n_groups; i++) {
        const sx_nn_param_group *gr = &p->groups[i];
        if ((unsigned)gr->select > SX_GROUP_NOT_WEIGHTS ||
            (gr->select == SX_GROUP_NAME && gr->name == NULL) || !(gr->lr_scale >= 0) ||
            !(gr->weight_decay >= 0) || !isfinite(gr->lr_scale + gr->weight_decay))
            return sx_error(SX_E_ARG,
                            "%s: parameter group %d: select %d, name %s, lr_scale %g, "
                            "weight_decay %g (want a known select, a name for SX_GROUP_NAME, "
                            "finite values >= 0)",
                            who, i, (int)gr->select, gr->name ? gr->name : "(null)", gr->lr_scale,
                            gr->weight_decay);
    }
    if (p->schedule.kind != SX_SCHED_COSINE && p->schedule.kind != SX_SCHED_ONE_CYCLE)
        SX_TRY(nn_schedule_check(who, &p->schedule)); /* those two once total_steps is known */
    else if (p->schedule.total_steps < 0)
        return sx_error(SX_E_ARG, "%s: total_steps %lld (want >= 0)", who,
                        (long long)p->schedule.total_steps);
    return nn_loss_check(who, p, 0);
}

/* The network against the data: an input of the images' shape, one output per class. */
static sx_status check_fit(const char *who, const sx_nn_net *net, const sx_ds_images *train)
{
    sx_nn_layer *in = nn_input_layer(net), *last = nn_output_layer(net);
    if (in == NULL || last == NULL || last->rank != 1 || net->n_outputs >= 2)
        return sx_error(SX_E_STATE,
                        "%s: the network needs an input and one (batch, classes) output (%d "
                        "outputs: train them with sx_nn_fit)",
                        who, net->n_outputs >= 2 ? net->n_outputs : 1);
    if (last->shape[0] != train->classes)
        return sx_error(SX_E_SHAPE, "%s: the network has %lld outputs, the data %lld classes", who,
                        (long long)last->shape[0], (long long)train->classes);
    if (in->rank != 3 || in->shape[0] != train->h || in->shape[1] != train->w ||
        in->shape[2] != train->c)
        return sx_error(SX_E_SHAPE,
                        "%s: the network takes (%lld,%lld,%lld) images, the data has "
                        "(%lld,%lld,%lld)",
                        who, (long long)in->shape[0], (long long)in->shape[1],
                        (long long)in->shape[2], (long long)train->h, (long long)train->w,
                        (long long)train->c);
    return SX_OK;
}

sx_status sx_nn_fit(sx_nn_net *net, const sx_nn_fit_params *params, const sx_ds_source *train,
                    const sx_ds_source *val, sx_nn_history *history)
{
    const char *who = "sx_nn_fit";
    if (history != NULL)
        memset(history, 0, sizeof *history);
    if (net == NULL || train == NULL)
        return sx_error(SX_E_ARG, "%s: NULL network or training source", who);
    nn_loop_args a = {.who = who, .net = net};
    a.fp = params ? *params : sx_nn_fit_params_default();
    SX_TRY(check_params(who, &a.fp.train));
    /* the data's preprocessing goes into the network (the loaders then give raw values) */
    SX_TRY(nn_prep_sources(who, net, &a.fp, &train, &val, true));
    SX_TRY(nn_fit_check(who, net, &a.fp, train, val));
    a.train = train;
    a.val = val;
    return nn_loop(&a, history, NULL);
}

/* sx_nn_fit's run over the image set: epochs counted from the network's start (start_epoch 0),
 * no validation, no training metric, no fit state of its own (no PATH.fit, no history line),
 * the test set's accuracy after every epoch into the report. */
sx_status sx_nn_train(sx_nn_net *net, const sx_nn_train_params *params, const sx_ds_images *train,
                      const sx_ds_images *test, sx_nn_train_report *report)
{
    const char *who = "sx_nn_train";
    if (net == NULL || train == NULL)
        return sx_error(SX_E_ARG, "%s: NULL network or training set", who);
    nn_loop_args a = {.who = who, .net = net, .test = test, .stateless = true};
    a.fp = sx_nn_fit_params_default();
    a.fp.train = params ? *params : sx_nn_train_params_default();
    a.fp.train_metric = false;
    a.fp.restore_best = false;
    a.fp.start_epoch = 0;
    SX_TRY(check_params(who, &a.fp.train));
    SX_TRY(check_fit(who, net, train));
    /* the image set as a source: its scale (1/255) and class names taken into the network when
     * it has none yet */
    sx_ds_source *src = NULL;
    SX_TRY(sx_ds_source_images(train, &src));
    const sx_ds_source *t = src;
    sx_status s = nn_prep_sources(who, net, &a.fp, &t, NULL, true);
    a.train = t;
    if (s == SX_OK)
        s = nn_loop(&a, NULL, report);
    sx_ds_source_free(src);
    return s;
}
