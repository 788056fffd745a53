/* mnist_train: train the reference CNN (Owl's lazy_mnist) on MNIST read straight from the
 * compressed IDX files, then report test accuracy, speed and memory in one line.
 *
 *   input 28x28x1 -> lambda x/256 -> conv2d 5x5, 32 filters, SAME, relu -> max_pool 2x2
 *   -> dropout 0.1 -> fully_connected 1024 relu -> linear 10 softmax
 *   cross-entropy, Adagrad lr 0.005, minibatch 100, f32
 *
 * Options: --data DIR --epochs N --limit N --batch B --optimiser NAME --lr X --seed S
 *          --threads T --save PATH --eager --dot PATH --checkpoint PATH --quiet
 *          --no-optimise --no-plan (to measure what the graph optimiser and planner buy)
 *          --profile (time per op kind of the compiled training graph)
 * Ends with: result: test_accuracy=A train_seconds=S images_per_second=R peak_rss_mb=M
 *            nodes_before=N1 nodes_after=N2 planned_mb=P naive_mb=Q infer_images_per_second=I
 *            compile_ms=C infer_compile_ms=D edges_before=E1 edges_after=E2
 * (compile_ms: the training graph, 0 with --eager; infer_images_per_second: a separate, timed
 * pass of the test set through a freshly compiled inference graph, bytes converted per batch;
 * bench/compare_torch parses these fields by name.) */
#include "mnist_ref.h"

/* The run itself is tools/mnist_ref.c, shared with `strix train`. */
int main(int argc, char **argv)
{
    return strix_mnist_train("mnist_train", argc, argv);
}
