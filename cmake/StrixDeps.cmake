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
# No OpenMP runtime: strix's parallel loops run on its own pool (tensor/core/par.c); `#pragma omp
# simd` hints are compiled with -fopenmp-simd (no runtime, no threads).
include(CheckCCompilerFlag)
check_c_compiler_flag(-fopenmp-simd STRIX_HAVE_OPENMP_SIMD)
find_package(ZLIB)
if(NOT ZLIB_FOUND)
    message(FATAL_ERROR "zlib not found: apt-get install zlib1g-dev (or run scripts/setup)")
endif()
# datasets/: PNG and JPEG images (libpng, libjpeg-turbo) and CSV files (libcsv, which ships no
# .pc file on Debian).
pkg_check_modules(LIBPNG IMPORTED_TARGET libpng)
if(NOT LIBPNG_FOUND)
    message(FATAL_ERROR "libpng not found: apt-get install libpng-dev (or run scripts/setup)")
endif()
pkg_check_modules(LIBJPEG IMPORTED_TARGET libjpeg)
if(NOT LIBJPEG_FOUND)
    message(FATAL_ERROR "libjpeg not found: apt-get install libjpeg62-turbo-dev "
                        "(or run scripts/setup)")
endif()
# stb_image (PNM, BMP, GIF and TGA images): its header only; datasets/decode_stb.c compiles the
# implementation itself (allocations through strix's hook, only the formats it reads), so
# Debian's libstb.so is not linked.
find_path(STRIX_STB_INCLUDE_DIR stb/stb_image.h)
if(NOT STRIX_STB_INCLUDE_DIR)
    message(FATAL_ERROR "stb_image.h not found (stb/stb_image.h): apt-get install libstb-dev "
                        "(or run scripts/setup)")
endif()
find_path(LIBCSV_INCLUDE_DIR csv.h)
find_library(LIBCSV_LIBRARY csv)
if(NOT LIBCSV_INCLUDE_DIR OR NOT LIBCSV_LIBRARY)
    message(FATAL_ERROR "libcsv not found: apt-get install libcsv-dev (or run scripts/setup)")
endif()
if(NOT TARGET strix_libcsv)
    add_library(strix_libcsv INTERFACE IMPORTED GLOBAL)
    set_target_properties(strix_libcsv PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES ${LIBCSV_INCLUDE_DIR}
        INTERFACE_LINK_LIBRARIES ${LIBCSV_LIBRARY})
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
