/* gemm.c: the one GEMM every matrix product of strix goes through (matmul, conv2d).
 * For now a thin wrapper over cblas ?gemm; see sx__gemm in tensor_impl.h for the contract. */
#include "tensor_impl.h"

#include <cblas.h>

void sx__gemm(sx_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
              const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
              int64_t ldc)
{
    enum CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE opb = tb ? CblasTrans : CblasNoTrans;
    if (dt == SX_F32)
        cblas_sgemm(CblasRowMajor, opa, opb, (int)m, (int)n, (int)k, (float)alpha, a, (int)lda, b,
                    (int)ldb, (float)beta, c, (int)ldc);
    else
        cblas_dgemm(CblasRowMajor, opa, opb, (int)m, (int)n, (int)k, alpha, a, (int)lda, b,
                    (int)ldb, beta, c, (int)ldc);
}
