# CMake toolchain for a cross build to AArch64 Linux (Debian's gcc-aarch64-linux-gnu and the
# arm64 multiarch -dev packages; scripts/setup-aarch64 installs them). ctest runs each test under
# qemu-aarch64 (user-mode emulation, no binfmt needed):
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# scripts/test-aarch64 builds and runs the kernel and op suites this way.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(triple aarch64-linux-gnu)

set(CMAKE_C_COMPILER ${triple}-gcc)
set(CMAKE_CXX_COMPILER ${triple}-g++)
set(CMAKE_AR ${triple}-ar CACHE FILEPATH "")
set(CMAKE_NM ${triple}-nm CACHE FILEPATH "")
set(CMAKE_OBJDUMP ${triple}-objdump CACHE FILEPATH "")
set(CMAKE_RANLIB ${triple}-ranlib CACHE FILEPATH "")
set(CMAKE_STRIP ${triple}-strip CACHE FILEPATH "")
set(CMAKE_LIBRARY_ARCHITECTURE ${triple})

# The cross libc lives in /usr/aarch64-linux-gnu, the multiarch libraries (OpenBLAS, zlib, ...) in
# /usr/lib/aarch64-linux-gnu with their headers in /usr/include: libraries and packages
# come only from the target's folders (CMAKE_LIBRARY_ARCHITECTURE picks lib/aarch64-linux-gnu
# under the root "/"), programs from the host.
set(CMAKE_FIND_ROOT_PATH /usr/${triple} /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config reads the target's .pc files only (the host's /usr/lib/x86_64-linux-gnu/pkgconfig
# would hand out x86-64 libraries), and first those of the arm64 Criterion that
# scripts/setup-aarch64 unpacks into STRIX_AARCH64_ROOT (it cannot be installed next to the
# host's).
if(NOT STRIX_AARCH64_ROOT)
    set(STRIX_AARCH64_ROOT /opt/strix-aarch64)
endif()
set(extra_libdir ${STRIX_AARCH64_ROOT}/usr/lib/${triple})
set(ENV{PKG_CONFIG_LIBDIR}
    ${extra_libdir}/pkgconfig:/usr/lib/${triple}/pkgconfig:/usr/share/pkgconfig)

# Programs run under qemu-aarch64 in user mode, with the cross libc's loader and libc from
# /usr/aarch64-linux-gnu (QEMU_LD_PREFIX is -L; LD_LIBRARY_PATH keeps the loader's own libc
# before the host cache's multiarch libc6:arm64, a different build whose internals the loader does
# not match: threads hang), the multiarch libraries from /usr/lib/aarch64-linux-gnu and the
# unpacked Criterion. A guest cannot execve an AArch64 program without binfmt_misc, and Criterion
# starts its workers so: tests/cross/qemu_exec.c, preloaded, runs them under qemu-aarch64 again
# (the settings travel in the QEMU_* variables). SX_TEST_EMULATED tells the suites they run
# emulated (tu_emulated in tests/testutil.h).
set(CMAKE_CROSSCOMPILING_EMULATOR env QEMU_LD_PREFIX=/usr/${triple}
    "QEMU_SET_ENV=SX_TEST_EMULATED=1,LD_LIBRARY_PATH=/usr/${triple}/lib:${extra_libdir},LD_PRELOAD=${CMAKE_BINARY_DIR}/libstrix_qemu_exec.so"
    qemu-aarch64 -L /usr/${triple})
