/* mnist_ref.h: the MNIST reference run (Owl's lazy_mnist CNN trained on MNIST, then a timed
 * inference pass and one result line), shared by examples/mnist_train and `strix train`: one
 * code path, so both print the same lines and train the same bits. */
#ifndef STRIX_MNIST_REF_H
#define STRIX_MNIST_REF_H

/* Parse argv (argv[0] is skipped) as mnist_train's options, run, and return the exit status:
 * 0 done, 1 a failure, 2 a usage error, 130 interrupted (Ctrl-C). Messages start with
 * "PROG: ". Built with the MPI module and started by mpirun with > 1 rank, it trains
 * data-parallel (--batch is each rank's) and rank 0 alone prints, saves and writes checkpoints;
 * the result line ends with ranks=N (1 without MPI). */
int strix_mnist_train(const char *prog, int argc, char **argv);

#endif
