# GPU per-op breakdown (docs/benchmarks.md, "GPU per-op breakdown"), run by
# hand or by tests/gpu/device_check.sh (gpu_ops_bench):
#   build/bin/bench_gpu_ops [--preset gpt2-124m] [--B 16] [--T 1024]
# Times every CUDA op of one training step in fp32, bf16 math and bf16
# storage. Built wherever nvcc builds the CUDA ops (it is host C++ calling
# them); its emulator build, bench_emu_gpu_ops, is in tests/emu.cmake.
if(PHALANX_HAVE_CUDA AND TARGET px_kernels_cuda AND TARGET px_model)
  add_executable(bench_gpu_ops ${CMAKE_CURRENT_LIST_DIR}/gpu_ops.cpp)
  target_link_libraries(bench_gpu_ops PRIVATE px_model px_kernels_cuda px_common)
endif()
