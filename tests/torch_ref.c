/* torch_ref.c: the reader of tests/data/torch_*.txt (format in torch_ref.h). */
#include "torch_ref.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

FILE *tr_open(const char *file)
{
    char path[1024];
    const char *self = __FILE__, *slash = strrchr(self, '/');
    cr_assert_not_null(slash, "__FILE__ is %s", self);
    snprintf(path, sizeof path, "%.*s/data/%s", (int)(slash - self), self, file);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    return f;
}

static void skip_line(FILE *f)
{
    int ch;
    while ((ch = fgetc(f)) != EOF && ch != '\n')
        ;
}

static void read_tensor(FILE *f, tr_case *c)
{
    cr_assert_lt(c->n_t, TR_MAX_TENSORS, "%s: more than %d tensors", c->name, TR_MAX_TENSORS);
    tr_tensor *t = &c->t[c->n_t];
    cr_assert_eq(fscanf(f, "%7s %d", t->name, &t->rank), 2, "%s: tensor header", c->name);
    cr_assert(t->rank >= 0 && t->rank <= SX_MAX_RANK, "%s: %s has rank %d", c->name, t->name,
              t->rank);
    t->size = 1;
    for (int d = 0; d < t->rank; d++) {
        long long v;
        cr_assert_eq(fscanf(f, "%lld", &v), 1, "%s: %s's shape", c->name, t->name);
        cr_assert(v >= 0 && v <= (1 << 24), "%s: %s's dim %lld", c->name, t->name, v);
        t->shape[d] = v;
        t->size *= v;
    }
    t->v = malloc((size_t)(t->size > 0 ? t->size : 1) * sizeof *t->v);
    cr_assert_not_null(t->v);
    c->n_t++; /* owned from here (tr_free) */
    for (int64_t j = 0; j < t->size; j++)
        cr_assert_eq(fscanf(f, "%lf", &t->v[j]), 1, "%s: %s[%lld]", c->name, t->name, (long long)j);
}

bool tr_read(FILE *f, tr_case *c)
{
    char word[64];
    memset(c, 0, sizeof *c);
    bool in_case = false;
    for (;;) {
        long at = ftell(f);
        if (fscanf(f, "%63s", word) != 1)
            return in_case;
        if (word[0] == '#') {
            skip_line(f);
        } else if (strcmp(word, "case") == 0) {
            if (in_case) { /* the next case: leave it for the next call */
                cr_assert_eq(fseek(f, at, SEEK_SET), 0);
                return true;
            }
            cr_assert_eq(fscanf(f, "%63s %15s", c->name, c->kind), 2, "case header");
            in_case = true;
        } else if (!in_case) {
            cr_assert_fail("malformed reference file at \"%s\"", word);
        } else if (strcmp(word, "tensor") == 0) {
            read_tensor(f, c);
        } else if (strcmp(word, "params") != 0) {
            char *end;
            double v = strtod(word, &end);
            cr_assert(*end == '\0' && c->n_t == 0, "%s: unexpected \"%s\"", c->name, word);
            cr_assert_lt(c->n_num, TR_MAX_NUMS, "%s: too many settings", c->name);
            c->num[c->n_num++] = v;
        }
    }
}

void tr_free(tr_case *c)
{
    for (int i = 0; i < c->n_t; i++)
        free(c->t[i].v);
    c->n_t = 0;
}

const tr_tensor *tr_tensor_of(const tr_case *c, const char *name)
{
    for (int i = 0; i < c->n_t; i++)
        if (strcmp(c->t[i].name, name) == 0)
            return &c->t[i];
    cr_assert_fail("case %s has no tensor %s", c->name, name);
    return NULL;
}

sx_tensor *tr_to_tensor(sx_dtype dt, const tr_tensor *t)
{
    sx_tensor *v = NULL;
    cr_assert_eq(sx_tensor_from_doubles(dt, t->rank, t->shape, t->v, t->size, &v), SX_OK, "%s",
                 sx_last_error());
    return v;
}

void tr_expect(const tr_case *c, const char *what, const sx_tensor *got, const tr_tensor *want,
               double tol)
{
    cr_assert_not_null(got, "%s %s: %s", c->name, what, sx_last_error());
    cr_assert(sx_shape_equal(got->rank, got->shape, want->rank, want->shape), "%s %s: shape",
              c->name, what);
    double scale = 0;
    for (int64_t i = 0; i < want->size; i++)
        scale = fmax(scale, fabs(want->v[i]));
    for (int64_t i = 0; i < want->size; i++) {
        double g = sx_tensor_get(got, i);
        cr_assert(fabs(g - want->v[i]) <= tol * (1 + scale), "%s %s (%s) [%lld]: %.17g, want %.17g",
                  c->name, what, sx_dtype_name(got->dtype), (long long)i, g, want->v[i]);
    }
}
