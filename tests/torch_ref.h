/* torch_ref.h: the reference files that tests/data/torch_*.py write with PyTorch (outputs and
 * gradients of a case), read by the suites that compare strix with them (autodiff_test_torch,
 * nn_test_norm, nn_test_rnn). A file is whitespace-separated text:
 *     # comment to the end of the line
 *     case NAME KIND [params] NUMBER...
 *     tensor NAME RANK DIM... VALUE...      (as many as the case has, in row-major order)
 * The numbers after KIND (the word `params` before them is skipped) are the case's settings;
 * what they mean is the writing script's and the reading suite's business. */
#ifndef SX_TORCH_REF_H
#define SX_TORCH_REF_H

#include <stdbool.h>
#include <stdio.h>
#include <sx_tensor.h>

#define TR_MAX_TENSORS 64
#define TR_MAX_NUMS 16

typedef struct tr_tensor {
    char name[8];
    int rank;
    int64_t shape[SX_MAX_RANK];
    int64_t size;
    double *v; /* owned by the case */
} tr_tensor;

typedef struct tr_case {
    char name[64], kind[16];
    int n_num;
    double num[TR_MAX_NUMS]; /* the settings after KIND */
    int n_t;
    tr_tensor t[TR_MAX_TENSORS]; /* in file order (names may repeat) */
} tr_case;

/* tests/data/<file>, open for reading; aborts the test when it cannot be opened. */
FILE *tr_open(const char *file);
/* Read the next case into c (its tensors owned by c until tr_free); false at the end of the
 * file. A malformed file aborts the test naming the case. */
bool tr_read(FILE *f, tr_case *c);
void tr_free(tr_case *c);
/* The case's first tensor named `name`; aborts the test when there is none. */
const tr_tensor *tr_tensor_of(const tr_case *c, const char *name);
/* A new tensor of dtype dt with t's shape and values (aborts the test on failure). */
sx_tensor *tr_to_tensor(sx_dtype dt, const tr_tensor *t);
/* got has want's shape and |got - want| <= tol * (1 + max |want|) everywhere; the failure names
 * the case, `what`, the dtype and the index. */
void tr_expect(const tr_case *c, const char *what, const sx_tensor *got, const tr_tensor *want,
               double tol);

#endif
