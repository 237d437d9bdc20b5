# Cross build for AArch64 Linux with Debian's crossbuild-essential-arm64
# (aarch64-linux-gnu-g++ 12); ctest runs the test binaries under qemu-user.
#   cmake -S . -B build/arm64 --toolchain cmake/toolchains/aarch64-linux-gnu.cmake
# tools/test.sh --arm64 installs the packages and does the whole job.
#
# Libraries: the compiled ones (GoogleTest, fmt, xxHash) are Debian's multiarch
# :arm64 packages under /usr/lib/aarch64-linux-gnu; the header-only ones (xsimd,
# GSL, nlohmann-json) are arch-independent and found in the host's /usr.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# The test binaries run on the multiarch libc6:arm64 (a dependency of the :arm64
# packages), whose loader is /lib/ld-linux-aarch64.so.1, so qemu needs no -L.
# Not `-L /usr/aarch64-linux-gnu`: that loader then reads the host's
# /etc/ld.so.cache, which lists the multiarch libc, and the mix of the cross
# loader with another build of libc hangs in the first pthread_create.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)

# Search the cross sysroot and the multiarch /usr (its arm64 libraries live in
# /usr/lib/aarch64-linux-gnu, its header-only packages in /usr/include and
# /usr/share); never run or link a host program or library by mistake.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config (xxHash) must read the arm64 .pc files, not the host's.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
