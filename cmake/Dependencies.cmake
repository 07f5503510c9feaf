# Every third-party dependency is found here, from Debian packages (scripts/setup.sh).
# Required: liburing, xxHash, OpenMP, nlohmann-json, CLI11, spdlog/fmt, OpenBLAS, GoogleTest,
# PCRE2 and ICU (the tokenizer's regexes and Unicode normalization).
# Optional (auto-detected, forced with STRATA_CUDA/MPI/HWLOC=ON|OFF): CUDA (nvcc, cudart,
# cuBLAS, NCCL), MPI, hwloc. CUDA's AUTO means "where nvcc is": with nvcc present the CUDA
# backend is built or the configure fails, so a build machine that loses NCCL or cuBLAS stops
# instead of quietly compiling without the backend.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
find_package(GTest REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(ICU_UC REQUIRED IMPORTED_TARGET icu-uc)
# serve/: HTTP (Debian's libcpp-httplib-dev, compiled: one .so, not a header to build each time)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

# --- hwloc (optional) --------------------------------------------------------------------
set(STRATA_HAVE_HWLOC OFF)
if(NOT STRATA_HWLOC STREQUAL "OFF")
  if(STRATA_HWLOC STREQUAL "ON")
    pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
  else()
    pkg_check_modules(HWLOC IMPORTED_TARGET hwloc)
  endif()
  if(HWLOC_FOUND)
    set(STRATA_HAVE_HWLOC ON)
  endif()
endif()

# --- MPI (optional) ----------------------------------------------------------------------
set(STRATA_HAVE_MPI OFF)
if(NOT STRATA_MPI STREQUAL "OFF")
  if(STRATA_MPI STREQUAL "ON")
    find_package(MPI REQUIRED COMPONENTS C)
  else()
    find_package(MPI COMPONENTS C)
  endif()
  if(MPI_C_FOUND)
    set(STRATA_HAVE_MPI ON)
  endif()
endif()

# --- CUDA (optional) ---------------------------------------------------------------------
set(STRATA_HAVE_CUDA OFF)
if(NOT STRATA_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures (90 = H100/H200)")
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 does not know nvcc 13 dialect flags for C++20
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    # nvcc is here, so the CUDA backend is built (AUTO and ON alike): anything it needs that is
    # missing is an error naming it, never a quiet build without CUDA.
    set(strata_cuda_missing "")
    find_package(CUDAToolkit)
    if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cudart)
      list(APPEND strata_cuda_missing "the CUDA runtime (cudart)")
    endif()
    if(NOT TARGET CUDA::cublas)
      list(APPEND strata_cuda_missing "cuBLAS (libcublas)")
    endif()
    if(NOT TARGET CUDA::cublasLt)
      list(APPEND strata_cuda_missing "cuBLASLt (libcublasLt)")
    endif()
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/include /usr/include)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/lib /usr/lib/x86_64-linux-gnu)
    if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
      list(APPEND strata_cuda_missing "NCCL (nccl.h and libnccl.so)")
    endif()
    if(strata_cuda_missing)
      list(JOIN strata_cuda_missing ", " strata_cuda_missing)
      message(FATAL_ERROR "STRATA_CUDA=${STRATA_CUDA}: nvcc was found (${CMAKE_CUDA_COMPILER}), so "
                          "the CUDA backend is built, but it needs ${strata_cuda_missing}, which "
                          "were not found. Install them (or set CMAKE_PREFIX_PATH, NCCL_INCLUDE_DIR "
                          "and NCCL_LIBRARY), or configure with -DSTRATA_CUDA=OFF to build "
                          "without CUDA.")
    endif()
    add_library(strata_nccl UNKNOWN IMPORTED)
    set_target_properties(strata_nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                          INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
    set(STRATA_HAVE_CUDA ON)
  elseif(STRATA_CUDA STREQUAL "ON")
    message(FATAL_ERROR "STRATA_CUDA=ON but no CUDA compiler (nvcc) was found; set "
                        "CMAKE_CUDA_COMPILER or configure with -DSTRATA_CUDA=OFF")
  else()
    find_program(STRATA_NVCC nvcc)
    if(STRATA_NVCC)
      message(FATAL_ERROR "STRATA_CUDA=AUTO: nvcc is at ${STRATA_NVCC} but CMake cannot compile "
                          "CUDA with it (see CMakeFiles/CMakeError.log); set CMAKE_CUDA_COMPILER "
                          "and CMAKE_CUDA_HOST_COMPILER, or configure with -DSTRATA_CUDA=OFF to "
                          "build without CUDA.")
    endif()
    message(STATUS "strata: no nvcc found; building without CUDA (STRATA_CUDA=AUTO)")
  endif()
endif()
