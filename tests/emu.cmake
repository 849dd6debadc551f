# The CUDA side (kernels/*.cu and model/gpt_cuda.cu, unchanged) runs on the
# CPU under the emulator of tests/emu: the CUDA runtime, the kernels'
# threads and barriers, wmma and cuBLAS(Lt) are emulated, everything of ours
# is the real code. So the GPU tests' checks of indexing, masking, barriers,
# reductions and the model's wiring run on every machine, GPU or not:
#   emu_flash  tests/gpu/test_gpu_flash.c: the fused attention, T <= 256
#   emu_ops    tests/gpu/test_gpu_ops.c: every op against the CPU's
#   emu_ops_bf16  tests/gpu/test_gpu_ops_bf16.cpp: every bf16 overload
#              against the FP32 CUDA op of the same name
#   emu_model  tests/gpu/test_gpu_model.c: the CUDA model against the CPU
#              model, FP32 and bf16 math
#   emu_reference  tests/gpu/test_gpu_reference.c: the CUDA model against
#              the PyTorch fixture of tests/reference
#   emu_gpu_ops_bench  bench/gpu_ops.cpp (the GPU per-op benchmark) at a
#              tiny shape: every call of a step in each precision runs, and
#              bench/gpu_ops_check.py finds every table and the summary whole
# The same sources run on a real GPU as gpu_flash, gpu_ops, gpu_ops_bf16,
# gpu_model and gpu_reference; the emulator shows nothing of speed, of the
# hardware's memory model or of cuBLAS's own kernels (see
# tests/emu/include/cuda_emu_device.h). Needs no CUDA toolkit: the .cu files
# are rewritten to C++ (tests/emu/cu2cpp.py) and built with the host
# compiler.
set(PX_EMU_DIR ${CMAKE_CURRENT_LIST_DIR}/emu)
set(PX_EMU_CU kernels/cuda_context kernels/matmul kernels/attention kernels/flash_attention kernels/layernorm
    kernels/crossentropy kernels/elementwise kernels/encoder kernels/optimizer model/gpt_cuda)
set(px_emu_sources ${PX_EMU_DIR}/emu.cpp ${PX_EMU_DIR}/cublas.cpp)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  enable_language(ASM) # the fibers' switch; elsewhere emu.cpp uses ucontext
  list(APPEND px_emu_sources ${PX_EMU_DIR}/switch_x86_64.S)
endif()
foreach(k ${PX_EMU_CU})
  get_filename_component(name ${k} NAME)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/emu/${name}.cpp)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/emu
    COMMAND ${Python3_EXECUTABLE} ${PX_EMU_DIR}/cu2cpp.py ${CMAKE_SOURCE_DIR}/${k}.cu ${out}
    DEPENDS ${CMAKE_SOURCE_DIR}/${k}.cu ${PX_EMU_DIR}/cu2cpp.py
    COMMENT "emu: ${k}.cu -> C++")
  list(APPEND px_emu_sources ${out})
endforeach()

# The CPU ops and model (the tests' reference) are compiled in directly, not
# linked as px_kernels and px_model: those link the real CUDA side where nvcc
# exists.
add_library(px_kernels_emu STATIC ${px_emu_sources} ${CMAKE_SOURCE_DIR}/kernels/ops_cpu.c
            ${CMAKE_SOURCE_DIR}/model/gpt.c ${CMAKE_SOURCE_DIR}/model/llmc.c)
target_include_directories(px_kernels_emu BEFORE PUBLIC ${PX_EMU_DIR}/include)
target_include_directories(px_kernels_emu PUBLIC ${CMAKE_SOURCE_DIR}/kernels ${CMAKE_SOURCE_DIR}/model)
target_compile_definitions(px_kernels_emu PUBLIC PX_CUDA_EMU=1 PRIVATE PX_CUDA_DEFINE_AVAILABLE=1)
target_compile_options(px_kernels_emu PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-unknown-pragmas>
                                              $<$<COMPILE_LANGUAGE:C>:-O3 -fno-math-errno -fno-trapping-math>)
target_link_libraries(px_kernels_emu PUBLIC px_common OpenMP::OpenMP_C PkgConfig::OPENBLAS Threads::Threads m)

foreach(t flash ops model reference)
  add_executable(test_emu_${t} ${CMAKE_CURRENT_LIST_DIR}/gpu/test_gpu_${t}.c)
  target_link_libraries(test_emu_${t} PRIVATE px_kernels_emu)
  set_target_properties(test_emu_${t} PROPERTIES LINKER_LANGUAGE CXX)
endforeach()
add_executable(test_emu_ops_bf16 ${CMAKE_CURRENT_LIST_DIR}/gpu/test_gpu_ops_bf16.cpp)
target_link_libraries(test_emu_ops_bf16 PRIVATE px_kernels_emu)
add_test(NAME emu_flash COMMAND test_emu_flash 256)
add_test(NAME emu_ops COMMAND test_emu_ops)
add_test(NAME emu_ops_bf16 COMMAND test_emu_ops_bf16)
add_test(NAME emu_model COMMAND test_emu_model)
add_test(NAME emu_reference COMMAND test_emu_reference ${CMAKE_CURRENT_LIST_DIR}/reference)
set_tests_properties(emu_flash emu_ops emu_ops_bf16 emu_model emu_reference PROPERTIES TIMEOUT 600)
px_tier(unit emu_flash emu_ops emu_ops_bf16 emu_model emu_reference)

add_executable(bench_emu_gpu_ops ${CMAKE_SOURCE_DIR}/bench/gpu_ops.cpp)
target_link_libraries(bench_emu_gpu_ops PRIVATE px_kernels_emu)
px_add_py_test(emu_gpu_ops_bench ${CMAKE_SOURCE_DIR}/bench/gpu_ops_check.py $<TARGET_FILE:bench_emu_gpu_ops>
               --preset tiny --B 2 --T 64 --reps 2 --warmup 1)
set_tests_properties(emu_gpu_ops_bench PROPERTIES TIMEOUT 120)
px_tier(unit emu_gpu_ops_bench)
