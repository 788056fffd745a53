# Find strix's dependencies; a missing one stops configuration naming the Debian package
# (scripts/setup installs them all).
find_package(PkgConfig)
if(NOT PKG_CONFIG_FOUND)
    message(FATAL_ERROR "pkg-config not found: apt-get install pkg-config (or run scripts/setup)")
endif()

pkg_check_modules(OPENBLAS IMPORTED_TARGET openblas)
if(NOT OPENBLAS_FOUND)
    message(FATAL_ERROR "OpenBLAS not found: apt-get install libopenblas-dev (or run scripts/setup)")
endif()
pkg_check_modules(LAPACKE IMPORTED_TARGET lapacke)
if(NOT LAPACKE_FOUND)
    message(FATAL_ERROR "LAPACKE not found: apt-get install liblapacke-dev (or run scripts/setup)")
endif()
# No OpenMP runtime: strix's parallel loops run on its own pool (tensor/par.c); `#pragma omp
# simd` hints are compiled with -fopenmp-simd (no runtime, no threads).
include(CheckCCompilerFlag)
check_c_compiler_flag(-fopenmp-simd STRIX_HAVE_OPENMP_SIMD)
find_package(ZLIB)
if(NOT ZLIB_FOUND)
    message(FATAL_ERROR "zlib not found: apt-get install zlib1g-dev (or run scripts/setup)")
endif()
find_package(Threads REQUIRED)
find_library(STRIX_LIBM m)

if(STRIX_BUILD_TESTS)
    pkg_check_modules(CRITERION IMPORTED_TARGET criterion)
    if(NOT CRITERION_FOUND)
        message(FATAL_ERROR "Criterion not found: apt-get install libcriterion-dev "
                            "(or run scripts/setup; or configure with -DSTRIX_BUILD_TESTS=OFF)")
    endif()
endif()
