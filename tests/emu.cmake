# The hand-written CUDA kernels run on the CPU, under the emulator of
# tests/emu, so that their logic (indexing, masking, barriers, reductions)
# is checked on every machine, GPU or not:
#   emu_flash  tests/gpu/test_gpu_flash.c on the fused attention, T <= 256
#   emu_ops    tests/gpu/test_gpu_ops.c on every op but the two that run
#              through cuBLAS (matmul, unfused attention)
# The same test sources run on a real GPU as gpu_flash and gpu_ops; the
# emulator shows nothing of speed or of the hardware's memory model (see
# tests/emu/include/cuda_emu_device.h). Needs no CUDA toolkit: the .cu files
# are rewritten to C++ (tests/emu/cu2cpp.py) and built with the host compiler.
set(PX_EMU_DIR ${CMAKE_CURRENT_LIST_DIR}/emu)
set(PX_EMU_KERNELS flash_attention layernorm crossentropy elementwise encoder optimizer)
set(px_emu_sources ${PX_EMU_DIR}/emu.cpp)
foreach(k ${PX_EMU_KERNELS})
  set(out ${CMAKE_CURRENT_BINARY_DIR}/emu/${k}.cpp)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/emu
    COMMAND ${Python3_EXECUTABLE} ${PX_EMU_DIR}/cu2cpp.py ${CMAKE_SOURCE_DIR}/kernels/${k}.cu ${out}
    DEPENDS ${CMAKE_SOURCE_DIR}/kernels/${k}.cu ${PX_EMU_DIR}/cu2cpp.py
    COMMENT "emu: ${k}.cu -> C++")
  list(APPEND px_emu_sources ${out})
endforeach()

# The CPU ops (the tests' reference) are compiled in directly, not linked as
# px_kernels: that library links the real CUDA ops where nvcc exists.
add_library(px_kernels_emu STATIC ${px_emu_sources} ${CMAKE_SOURCE_DIR}/kernels/ops_cpu.c)
target_include_directories(px_kernels_emu BEFORE PUBLIC ${PX_EMU_DIR}/include)
target_include_directories(px_kernels_emu PUBLIC ${CMAKE_SOURCE_DIR}/kernels)
target_compile_definitions(px_kernels_emu PUBLIC PX_CUDA_EMU=1)
target_compile_options(px_kernels_emu PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-unknown-pragmas>
                                              $<$<COMPILE_LANGUAGE:C>:-O3 -fno-math-errno -fno-trapping-math>)
target_link_libraries(px_kernels_emu PUBLIC OpenMP::OpenMP_C PkgConfig::OPENBLAS Threads::Threads m)

foreach(t flash ops)
  add_executable(test_emu_${t} ${CMAKE_CURRENT_LIST_DIR}/gpu/test_gpu_${t}.c)
  target_link_libraries(test_emu_${t} PRIVATE px_kernels_emu)
  set_target_properties(test_emu_${t} PROPERTIES LINKER_LANGUAGE CXX)
endforeach()
add_test(NAME emu_flash COMMAND test_emu_flash 256)
add_test(NAME emu_ops COMMAND test_emu_ops)
set_tests_properties(emu_flash emu_ops PROPERTIES TIMEOUT 600)
px_tier(unit emu_flash emu_ops)
