# CUDA detection for TROUPE_CUDA=AUTO|ON|OFF.
#
# AUTO turns the CUDA backend on when nvcc and the cuBLAS, cuDNN and NCCL
# headers and libraries are all found (on PATH, under $CUDA_HOME or
# /usr/local/cuda), and says what it found either way. ON fails the configure
# when something is missing. Sets TROUPE_HAVE_CUDA to 0 or 1.
set(TROUPE_HAVE_CUDA 0)
if(TROUPE_CUDA STREQUAL "OFF")
  message(STATUS "CUDA backend: off (TROUPE_CUDA=OFF)")
  return()
endif()

set(_missing "")
if(NOT CMAKE_CUDA_COMPILER)
  find_program(TROUPE_NVCC nvcc HINTS ENV CUDA_HOME PATH_SUFFIXES bin PATHS /usr/local/cuda/bin)
  if(TROUPE_NVCC)
    set(CMAKE_CUDA_COMPILER ${TROUPE_NVCC})
  else()
    list(APPEND _missing "nvcc")
  endif()
endif()

if(CMAKE_CUDA_COMPILER)
  get_filename_component(_cuda_bin ${CMAKE_CUDA_COMPILER} DIRECTORY)
  get_filename_component(_cuda_root ${_cuda_bin} DIRECTORY)
  set(CUDAToolkit_ROOT ${_cuda_root})
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND)
    list(APPEND _missing "CUDA toolkit (cudart)")
  endif()
  if(NOT TARGET CUDA::cublas)
    list(APPEND _missing "cuBLAS")
  endif()
  find_path(TROUPE_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${_cuda_root}/include)
  find_library(TROUPE_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} ${_cuda_root}/lib64)
  if(NOT TROUPE_CUDNN_INCLUDE_DIR OR NOT TROUPE_CUDNN_LIBRARY)
    list(APPEND _missing "cuDNN (cudnn.h, libcudnn)")
  endif()
  if(NOT TROUPE_KERNELS_ONLY)  # NCCL serves net/, which a kernels-only build skips
    find_path(TROUPE_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${_cuda_root}/include)
    find_library(TROUPE_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${_cuda_root}/lib64)
    if(NOT TROUPE_NCCL_INCLUDE_DIR OR NOT TROUPE_NCCL_LIBRARY)
      list(APPEND _missing "NCCL (nccl.h, libnccl)")
    endif()
  endif()
endif()

if(_missing)
  string(REPLACE ";" ", " _missing_text "${_missing}")
  if(TROUPE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TROUPE_CUDA=ON but not found: ${_missing_text}")
  endif()
  message(STATUS "CUDA backend: off (TROUPE_CUDA=AUTO; not found: ${_missing_text})")
  return()
endif()

# sm_90 machine code plus compute_90 PTX: runs natively on H100/H200 and can
# be JIT-compiled by the driver on later GPUs.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(TROUPE_HAVE_CUDA 1)

add_library(troupe::cudnn UNKNOWN IMPORTED)
set_target_properties(troupe::cudnn PROPERTIES IMPORTED_LOCATION ${TROUPE_CUDNN_LIBRARY}
                      INTERFACE_INCLUDE_DIRECTORIES ${TROUPE_CUDNN_INCLUDE_DIR})
if(NOT TROUPE_KERNELS_ONLY)
  add_library(troupe::nccl UNKNOWN IMPORTED)
  set_target_properties(troupe::nccl PROPERTIES IMPORTED_LOCATION ${TROUPE_NCCL_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${TROUPE_NCCL_INCLUDE_DIR})
endif()

if(TROUPE_KERNELS_ONLY)
  set(_nccl_text "not needed (TROUPE_KERNELS_ONLY)")
else()
  set(_nccl_text ${TROUPE_NCCL_LIBRARY})
endif()
message(STATUS "CUDA backend: on. nvcc ${CMAKE_CUDA_COMPILER_VERSION} (${CMAKE_CUDA_COMPILER}), "
               "architectures ${CMAKE_CUDA_ARCHITECTURES}; cuBLAS ${CUDAToolkit_LIBRARY_DIR}; "
               "cuDNN ${TROUPE_CUDNN_LIBRARY}; NCCL ${_nccl_text}")
