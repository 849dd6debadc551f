# The CUDA twin of the ops (ops_cuda.h) and the GPT-2 model on the GPU
# (model/gpt_cuda.h). Included by kernels/CMakeLists.txt only when nvcc was
# found (PHALANX_HAVE_CUDA); built everywhere nvcc exists, CI included, so
# every .cu file is compiled with warnings as errors even where no GPU runs it.
#
#   px_kernels_cuda  the ops: the .cu files here, cuBLAS and cuBLASLt
#   px_model_cuda    model/gpt_cuda.cu on top of px_kernels_cuda
#
# Hook into the CPU library (kernels/device.h's contract): when px_kernels
# exists, it links px_kernels_cuda and gets PX_HAVE_CUDA_OPS=1, so its
# px_cuda_available() (device.c) asks our px_cuda_device_count(). Without
# px_kernels (a tree that has only the CUDA side) px_kernels_cuda defines
# px_cuda_available() itself.
#
# --fmad=false: no contraction of a*b+c into one FMA, so the element math shared
# with the CPU (ops_math.h: GELU, exp, the AdamW update) rounds exactly as the
# CPU build does (gcc at -std=c11 does not contract either). The kernels it
# affects are memory-bound; cuBLAS is unaffected.
set(PX_CUDA_FLAGS
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false>)

add_library(px_kernels_cuda STATIC
  ${CMAKE_CURRENT_LIST_DIR}/cuda_context.cu
  ${CMAKE_CURRENT_LIST_DIR}/encoder.cu
  ${CMAKE_CURRENT_LIST_DIR}/layernorm.cu
  ${CMAKE_CURRENT_LIST_DIR}/matmul.cu
  ${CMAKE_CURRENT_LIST_DIR}/attention.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_attention.cu
  ${CMAKE_CURRENT_LIST_DIR}/elementwise.cu
  ${CMAKE_CURRENT_LIST_DIR}/crossentropy.cu
  ${CMAKE_CURRENT_LIST_DIR}/optimizer.cu)
target_include_directories(px_kernels_cuda PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(px_kernels_cuda
  PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt
  PRIVATE px_common Threads::Threads)
target_compile_options(px_kernels_cuda PRIVATE ${PX_CUDA_FLAGS})
set_target_properties(px_kernels_cuda PROPERTIES
  CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)

if(TARGET px_kernels)
  target_link_libraries(px_kernels PUBLIC px_kernels_cuda)
  target_compile_definitions(px_kernels PUBLIC PX_HAVE_CUDA_OPS=1)
else()
  target_compile_definitions(px_kernels_cuda PRIVATE PX_CUDA_DEFINE_AVAILABLE=1)
endif()

# The model lives in model/ but is built here, beside the ops it needs, so the
# CPU model's CMakeLists.txt stays free of CUDA. It uses the CPU model's config
# and blob layout (gpt.h), so it links px_model (defined later, in model/;
# CMake resolves target names at generate time).
add_library(px_model_cuda STATIC ${PROJECT_SOURCE_DIR}/model/gpt_cuda.cu)
target_include_directories(px_model_cuda PUBLIC ${PROJECT_SOURCE_DIR}/model)
target_link_libraries(px_model_cuda PUBLIC px_model px_kernels_cuda PRIVATE px_common)
target_compile_options(px_model_cuda PRIVATE ${PX_CUDA_FLAGS})
set_target_properties(px_model_cuda PROPERTIES
  CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)
